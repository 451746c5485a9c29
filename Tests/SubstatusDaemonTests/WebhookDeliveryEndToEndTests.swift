import Foundation
import RPCCore
import SubstatusWire
import SubstatusProcessTestKit
import Testing

/// Webhook delivery as a backend sees it, through the real substatusd and the `substatus` CLI:
/// many POSTs in flight to one endpoint while each user's events arrive one at a time and in log
/// order; a webhook's filters by event type and environment (`webhook add --events ...
/// --environment ...`); `webhook deliveries` showing each attempt's HTTP status or error and its
/// duration.
@Suite(.serialized) struct WebhookDeliveryEndToEndTests {
  static let daemonArguments = EventsEndToEndTests.daemonArguments

  /// Imports a user's history in one call: `months` monthly periods of `product` (the last one
  /// still running), in `environment`, the first transaction refunded when `refunded`.
  static func importHistory(
    _ client: DaemonClient, key: String, app: String, user: String, months: Int, product: String = "pro.monthly",
    environment: Substatus_V1_Environment = .production, refunded: Bool = false
  ) async throws {
    let now = Int64(Date().timeIntervalSince1970 * 1000)
    let month: Int64 = 30 * 86_400_000
    let start = now - Int64(months - 1) * month - 86_400_000
    var request = Substatus_V1_ImportTransactionsRequest()
    request.appID = app
    request.userID = user
    let original = "\(user)-\(environment == .sandbox ? "s" : "p")-0"
    for k in 0..<months {
      var t = Substatus_V1_Transaction()
      t.transactionID = k == 0 ? original : "\(original)-\(k)"
      t.originalTransactionID = original
      t.productID = product
      t.purchaseDateMs = start + Int64(k) * month
      t.expiresDateMs = start + Int64(k + 1) * month
      t.environment = environment
      if refunded && k == 0 { t.revocationDateMs = start + 86_400_000 }
      request.transactions.append(t)
    }
    _ = try await client.call(Substatus_V1_IngestService.importTransactions, request, key: key)
  }

  /// The app's whole log (several pages).
  static func log(_ client: DaemonClient, key: String, app: String) async throws -> [Substatus_V1_Event] {
    var events: [Substatus_V1_Event] = []
    var request = Substatus_V1_ListEventsRequest()
    request.appID = app
    request.limit = 1000
    while true {
      let page = try await client.call(Substatus_V1_EventService.listEvents, request, key: key)
      events += page.events
      if page.events.count < 1000 { return events }
      request.sinceCursor = page.nextCursor
    }
  }

  /// 16 users' histories replayed to one receiver that takes 30 ms per answer: POSTs overlap (the
  /// receiver sees several at once), yet no user ever has two in flight and each user's events
  /// arrive in log order. (Run with `--webhook-max-in-flight-per-tenant 1`, the overlap check
  /// fails: it tells one POST at a time from many.)
  @Test func oneUsersEventsArriveInOrderWhileManyPOSTsAreInFlight() async throws {
    let receiver = try await EventReceiver()
    defer { receiver.stop() }
    let daemon = try await RunningDaemon(extraArguments: Self.daemonArguments)
    defer { daemon.abandon() }
    let client = try DaemonClient(daemon)
    let (admin, app) = try await client.makeApp(operatorKey: daemon.operatorKey, bundleID: "com.example.order", appleAppID: 0)
    try await EventsEndToEndTests.putLifetime(client, key: admin, app: app)
    let users = (0..<16).map { "user-\($0)" }
    for user in users { try await Self.importHistory(client, key: admin, app: app, user: user, months: 4) }
    let log = try await Self.log(client, key: admin, app: app)
    #expect(log.count >= 4 * users.count, "a start and three renewals per user")

    // The webhook comes after the data: a replay of the whole log puts every delivery in the
    // queue at once.
    try receiver.send("DELAY 30")
    try await EventsEndToEndTests.subscribe(receiver, daemon, key: admin, app: app, url: "http://127.0.0.1:\(receiver.port)/hook")
    let added = try await EventsEndToEndTests.cli(daemon, key: admin, ["webhook", "list", app, "--json"])
    let webhookID = try #require(
      (try JSONSerialization.jsonObject(with: Data(added.utf8)) as? [String: Any]).flatMap {
        ($0["webhooks"] as? [[String: Any]])?.first?["webhookId"] as? String
      })
    let replayed = try await EventsEndToEndTests.cli(daemon, key: admin, ["events", "replay", app, "--since", "", "--webhook", webhookID])
    #expect(replayed.contains("deliveries created: \(log.count)"), "\(replayed)")

    let ids = Set(log.map(\.eventID))
    #expect(await receiver.waitUntil(timeout: 60) { records in Set(records.filter(\.valid).map(\.eventID)).isSuperset(of: ids) })
    let records = receiver.records.filter { !$0.hung }
    #expect(records.allSatisfy { $0.valid && $0.status == 200 })
    let most = records.map(\.inFlight).max() ?? 0
    #expect(most >= 4, "many POSTs in flight to the endpoint at once (at most \(most) seen)")
    #expect(records.allSatisfy { $0.userInFlight == 1 }, "one user's next event only after the last one's answer")
    for user in users {
      var firsts: [String] = []
      for record in records where record.userID == user && !firsts.contains(record.eventID) { firsts.append(record.eventID) }
      #expect(firsts == log.filter { $0.userID == user }.map(\.eventID), "\(user)'s events in log order")
    }
    client.transport.close()
    let (status, _) = await daemon.stop()
    #expect(status == 0)
  }

  /// `webhook add --events REFUNDED,EXPIRED --environment production`: the webhook gets only its
  /// types of its environment; an unknown type is refused by name; `webhook deliveries` shows each
  /// attempt: a delivered one's status, a failed one's status or error, and their durations.
  @Test func aWebhookGetsOnlyItsTypesAndEnvironmentAndItsDeliveriesShowEachAttempt() async throws {
    let receiver = try await EventReceiver()
    defer { receiver.stop() }
    let daemon = try await RunningDaemon(extraArguments: Self.daemonArguments)
    defer { daemon.abandon() }
    let client = try DaemonClient(daemon)
    let (admin, app) = try await client.makeApp(operatorKey: daemon.operatorKey, bundleID: "com.example.filters", appleAppID: 0)
    try await EventsEndToEndTests.putLifetime(client, key: admin, app: app)

    // An unknown type is refused before anything is sent, naming it and the known ones.
    let executable = try builtExecutable("substatus")
    let (refusedStatus, _, refusal) = try await runProcess(
        executable,
        ["webhook", "add", app, "--url", "http://127.0.0.1:\(receiver.port)/hook", "--events", "REFUNDED,EXPIRD",
         "--addr", daemon.grpc, "--key", admin])
    #expect(refusedStatus != 0)
    #expect(refusal.contains("--events: unknown event type 'EXPIRD'"), "\(refusal)")
    #expect(refusal.contains("REFUNDED") && refusal.contains("EXPIRED"), "the known names are listed: \(refusal)")
    #expect(try await EventsEndToEndTests.cli(daemon, key: admin, ["webhook", "list", app]).contains("no webhooks"))

    let added = try await EventsEndToEndTests.cli(
      daemon, key: admin,
      ["webhook", "add", app, "--url", "http://127.0.0.1:\(receiver.port)/hook", "--events", "REFUNDED,EXPIRED",
       "--environment", "production"])
    let secret = try #require(
      added.split(separator: "\n").first { $0.hasPrefix("signing secret") }.map {
        String($0.dropFirst("signing secret".count)).trimmingCharacters(in: .whitespaces)
      })
    try receiver.send("SECRET \(secret)")
    let fields = added.split(separator: "\n").map { $0.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ") }
    #expect(fields.contains("events EXPIRED,REFUNDED"), "\(added)")
    #expect(fields.contains("environment production"), "\(added)")
    let listed = try await EventsEndToEndTests.cli(daemon, key: admin, ["webhook", "list", app, "--json"])
    let hook = try #require(
      (try JSONSerialization.jsonObject(with: Data(listed.utf8)) as? [String: Any]).flatMap {
        ($0["webhooks"] as? [[String: Any]])?.first
      })
    #expect(hook["environment"] as? String == "ENVIRONMENT_PRODUCTION")
    #expect(hook["eventTypes"] as? [String] == ["EVENT_TYPE_EXPIRED", "EVENT_TYPE_REFUNDED"])
    let webhookID = try #require(hook["webhookId"] as? String)

    // Production: alice's purchase refunded; bob's plain subscription. Sandbox: carol's refunded
    // purchase. Only alice's REFUNDED is for this webhook.
    try await Self.importHistory(client, key: admin, app: app, user: "alice", months: 1, refunded: true)
    try await Self.importHistory(client, key: admin, app: app, user: "bob", months: 2)
    try await Self.importHistory(client, key: admin, app: app, user: "carol", months: 1, environment: .sandbox, refunded: true)
    let log = try await Self.log(client, key: admin, app: app)
    let wanted = log.filter { $0.environment == .production && [.refunded, .expired].contains($0.type) }
    #expect(Set(wanted.map(\.userID)) == ["alice"], "\(log.map { "\($0.userID) \($0.type) \($0.environment)" })")
    #expect(wanted.contains { $0.type == .refunded })
    #expect(log.contains { $0.userID == "carol" && $0.type == .refunded && $0.environment == .sandbox })
    #expect(log.contains { $0.userID == "bob" && $0.type == .renewed })
    #expect(await receiver.waitUntil { records in Set(records.map(\.eventID)).isSuperset(of: wanted.map(\.eventID)) })

    // Then the receiver fails: dave's production refund is attempted once and answered 503.
    try receiver.send("FAIL 503")
    try await Self.importHistory(client, key: admin, app: app, user: "dave", months: 1, refunded: true)
    #expect(await receiver.waitUntil { records in records.contains { $0.userID == "dave" && $0.status == 503 } })
    // Whatever else was written meanwhile, only the webhook's types of its environment came.
    let received = receiver.records
    #expect(
      received.allSatisfy { ["EVENT_TYPE_REFUNDED", "EVENT_TYPE_EXPIRED"].contains($0.type) && $0.event?.environment == .production },
      "\(received.map(\.type))")
    #expect(Set(received.map(\.userID)) == ["alice", "dave"])

    // Each attempt, with its result and duration.
    let deliveries = try await EventsEndToEndTests.cli(daemon, key: admin, ["webhook", "deliveries", app, webhookID])
    let lines = deliveries.split(separator: "\n").map(String.init)
    #expect(lines.first?.contains("RESULT") == true && lines.first?.contains("DURATION") == true, "\(deliveries)")
    let alice = try #require(lines.first { $0.contains("alice") }, "\(deliveries)")
    #expect(alice.contains("DELIVERED") && alice.contains("HTTP 200") && alice.contains(" ms"), "\(alice)")
    let dave = try #require(lines.first { $0.contains("dave") }, "\(deliveries)")
    #expect(dave.contains("PENDING") && dave.contains("HTTP 503") && dave.contains(" ms"), "\(dave)")
    #expect(lines.dropFirst().allSatisfy { $0.contains("alice") || $0.contains("dave") }, "only the webhook's deliveries: \(deliveries)")
    let json = try await EventsEndToEndTests.cli(daemon, key: admin, ["webhook", "deliveries", app, webhookID, "--json"])
    let attempts = ((try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])?["deliveries"] as? [[String: Any]] ?? [])
      .flatMap { $0["attempts"] as? [[String: Any]] ?? [] }
    #expect(lines.count == 1 + attempts.count, "a header and one line per attempt: \(deliveries)")
    #expect(attempts.contains { $0["httpStatus"] as? Int == 503 && $0["error"] as? String == "the receiver answered HTTP 503" })

    // A receiver that is gone: the attempt shows the connection error.
    let gone = try await EventReceiver()
    let gonePort = gone.port
    gone.stop()
    _ = try await EventsEndToEndTests.cli(
      daemon, key: admin, ["webhook", "add", app, "--url", "http://127.0.0.1:\(gonePort)/hook", "--environment", "sandbox"])
    let second = try await EventsEndToEndTests.cli(daemon, key: admin, ["webhook", "list", app])
    #expect(second.contains("sandbox") && second.contains("both") == false, "\(second)")
    try await Self.importHistory(client, key: admin, app: app, user: "erin", months: 1, environment: .sandbox)
    let listedAgain = try await EventsEndToEndTests.cli(daemon, key: admin, ["webhook", "list", app, "--json"])
    let goneID = try #require(
      ((try JSONSerialization.jsonObject(with: Data(listedAgain.utf8)) as? [String: Any])?["webhooks"] as? [[String: Any]])?
        .first { ($0["url"] as? String)?.contains(":\(gonePort)/") == true }?["webhookId"] as? String)
    var refused = ""
    _ = try await waitUntil(timeout: .seconds(15), every: .milliseconds(100)) {
      refused = try await EventsEndToEndTests.cli(daemon, key: admin, ["webhook", "deliveries", app, goneID])
      return refused.contains("connection refused")
    }
    let erin = try #require(refused.split(separator: "\n").first { $0.contains("erin") }, "\(refused)")
    #expect(erin.contains("connection refused") && erin.contains(" ms"), "\(erin)")
    client.transport.close()
    let (status, _) = await daemon.stop()
    #expect(status == 0)
  }
}
