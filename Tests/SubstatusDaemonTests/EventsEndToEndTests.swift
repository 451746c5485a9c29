import Foundation
import RPCCore
import SubstatusWire
import Testing

/// Events out through the real processes: substatusd with its SQLite store, the `substatus` CLI,
/// a WatchEvents stream over HTTP/2; SIGKILL of substatusd after an acknowledged ingest loses no
/// event and doubles none.
@Suite(.serialized) struct EventsEndToEndTests {
  static let daemonArguments = ["--allow-private-webhooks", "--refresh-interval", "0", "--reconcile-interval", "0"]

  /// Runs the `substatus` CLI against the daemon (off the cooperative pool); fails on a non-zero exit.
  static func cli(_ daemon: RunningDaemon, key: String, _ arguments: [String]) async throws -> String {
    let executable = try builtExecutable("substatus")
    let (status, out, err) = try await offThePool {
      try runProcess(executable, arguments + ["--addr", daemon.grpc, "--key", key])
    }
    guard status == 0 else { throw DaemonFailure("substatus \(arguments.joined(separator: " ")) exited \(status): \(err)") }
    return out
  }

  /// Imports one transaction for a user.
  static func purchase(
    _ client: DaemonClient, key: String, app: String, user: String, id: String, product: String,
    purchasedMs: Int64, expiresMs: Int64 = 0
  ) async throws {
    var request = Substatus_V1_ImportTransactionsRequest()
    request.appID = app
    request.userID = user
    var t = Substatus_V1_Transaction()
    t.transactionID = id
    t.originalTransactionID = id
    t.productID = product
    t.purchaseDateMs = purchasedMs
    t.expiresDateMs = expiresMs
    request.transactions = [t]
    _ = try await client.call(Substatus_V1_IngestService.importTransactions, request, key: key)
  }

  /// The whole log of the app, in order.
  static func log(_ client: DaemonClient, key: String, app: String) async throws -> [Substatus_V1_Event] {
    var request = Substatus_V1_ListEventsRequest()
    request.appID = app
    request.limit = 1000
    return try await client.call(Substatus_V1_EventService.listEvents, request, key: key).events
  }

  @Test func acknowledgedEventsSurviveASIGKILLAndAWatcherAndTheCLISeeTheLogInOrder() async throws {
    var daemon = try await offThePool { try RunningDaemon(extraArguments: Self.daemonArguments) }
    defer { if daemon.process.isRunning { _ = daemon.stop() } }
    var client = try DaemonClient(daemon)
    let (admin, app) = try await client.makeApp(operatorKey: daemon.operatorKey, bundleID: "com.example.events", appleAppID: 0)
    var lifetime = Substatus_V1_Product()
    lifetime.productID = "lifetime"
    lifetime.type = .nonConsumable
    var put = Substatus_V1_PutProductsRequest()
    put.appID = app
    put.products = [lifetime]
    _ = try await client.call(Substatus_V1_AdminService.putProducts, put, key: admin)

    // The start of the log, for a watcher that reads it all.
    var start = Substatus_V1_ListEventsRequest()
    start.appID = app
    let startCursor = try await client.call(Substatus_V1_EventService.listEvents, start, key: admin).nextCursor

    let now = Int64(Date().timeIntervalSince1970 * 1000)
    let day: Int64 = 86_400_000
    try await Self.purchase(client, key: admin, app: app, user: "alice", id: "1001", product: "lifetime", purchasedMs: now - day)
    try await Self.purchase(
      client, key: admin, app: app, user: "bob", id: "2001", product: "pro.monthly", purchasedMs: now - day,
      expiresMs: now + 29 * day)
    let before = try await Self.log(client, key: admin, app: app)
    // Acknowledged, then SIGKILL: the events were committed with the data.
    daemon.kill()
    let directory = daemon.directory
    daemon = try await offThePool { try RunningDaemon(extraArguments: Self.daemonArguments, reusing: directory) }
    client.transport.close()
    client = try DaemonClient(daemon)
    let after = try await Self.log(client, key: admin, app: app)
    #expect(after.map(\.eventID) == before.map(\.eventID), "nothing lost, nothing doubled")
    #expect(after.contains { $0.userID == "alice" && $0.type == .oneTimePurchased })
    #expect(after.contains { $0.userID == "bob" && $0.type == .subscriptionStarted })
    // Re-importing the same data after the restart appends nothing.
    try await Self.purchase(client, key: admin, app: app, user: "alice", id: "1001", product: "lifetime", purchasedMs: now - day)
    #expect(try await Self.log(client, key: admin, app: app).count == after.count)

    // A watcher from the start of the log gets the same sequence, then what is written next.
    var watch = Substatus_V1_WatchEventsRequest()
    watch.appID = app
    watch.sinceCursor = startCursor
    var metadata: Metadata = [:]
    metadata.addString("Bearer \(admin)", forKey: "authorization")
    let stream = try await client.client.serverStreaming(
      method: Substatus_V1_EventService.watchEvents.path, request: watch, response: Substatus_V1_WatchEventsResponse.self,
      metadata: metadata)
    var iterator = stream.makeAsyncIterator()
    var watched: [String] = []
    while watched.count < after.count, let message = try await iterator.next() { watched.append(message.event?.eventID ?? "") }
    #expect(watched == after.map(\.eventID))
    try await Self.purchase(client, key: admin, app: app, user: "carol", id: "3001", product: "lifetime", purchasedMs: now)
    let live = try await iterator.next()
    #expect(live?.event?.userID == "carol")
    #expect(live?.event?.type == .oneTimePurchased)

    // The CLI lists the same log.
    let listed = try await Self.cli(daemon, key: admin, ["events", "list", app, "--user", "alice"])
    #expect(listed.contains("ONE_TIME_PURCHASED"))
    // SIGTERM with the watch open: the stream ends and the daemon stops cleanly.
    client.transport.close()
    let (status, _) = daemon.stop()
    #expect(status == 0)
  }
}
