import Foundation
import RPCCore
import SubstatusJSON
import SubstatusWire
import SubstatusProcessTestKit
import Testing

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// The lifecycle and fault end-to-end tests' world, all real processes: `appstore-sim` with a
/// frozen clock at ``start``, posting V2 notifications; `substatusd` following the simulator's
/// clock (`--clock-url`), trusting its root; a webhook receiver (``EventReceiver``) subscribed to
/// the app, verifying `Substatus-Signature` with Python's `hmac`. Time moves only through
/// ``advance(days:)`` and friends, so what substatusd does by time alone (the transition
/// scheduler, webhook retries, leases) happens when the test says.
final class LifecycleRig: @unchecked Sendable {
  /// 2026-03-02T00:00:00Z, a Monday: where the simulated clock starts.
  static let start: Int64 = 1_772_409_600_000
  static let day: Int64 = 86_400_000
  static let bundleID = "com.example.lifecycle"
  static let appleAppID: Int64 = 6_400_000_123

  let directory: URL
  let sim: RunningSimulator
  private(set) var daemon: RunningDaemon
  private(set) var client: DaemonClient
  let receiver: EventReceiver
  /// With `relayingNotifications`, the simulator's notifications go through this relay
  /// (`notification_relay.py`), which forwards them to the running substatusd, restarts included.
  let relay: EventReceiver?
  let admin: String
  let app: String
  let webhookID: String
  /// The start of the app's log, for a watcher that reads it all.
  let startCursor: String

  /// substatusd's flags (a restart passes the same).
  let daemonArguments: [String]
  /// substatusd's store (a restart opens the same).
  let store: DaemonStore

  /// Starts the three processes; the simulator's app sells `pro.monthly` (level 2, 9.99 USD, a
  /// one-week free trial, family shareable) and `pro.plus.monthly` (level 1, 14.99 USD) in group
  /// `pro`, with a `graceDays` billing grace period. With `relayingNotifications`, the simulator
  /// posts notifications to ``relay``, whose URL a restart does not change (the simulator retries
  /// a notification at the URL it first tried). substatusd runs on `store`: SQLite in its data
  /// directory, or a fresh PostgreSQL database.
  init(graceDays: Int = 3, relayingNotifications: Bool = false, store: TestStore = .sqlite) async throws {
    directory = FileManager.default.temporaryDirectory.appendingPathComponent("lifecycle-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    let rootFile = directory.appendingPathComponent("sim-root.pem").path
    sim = try await RunningSimulator(extraArguments: ["--root-ca-out", rootFile, "--start-ms", String(Self.start)])
    daemonArguments = [
      "--apple-root-ca", rootFile, "--clock-url", "http://\(sim.address)/control/clock", "--allow-private-webhooks",
      "--refresh-interval", "0", "--reconcile-interval", "0",
    ]
    let arguments = daemonArguments
    self.store = try await store.make()
    daemon = try await RunningDaemon(store: self.store, extraArguments: arguments)
    client = try DaemonClient(daemon)
    receiver = try await EventReceiver()
    relay = relayingNotifications ? try await EventReceiver(script: "notification_relay.py") : nil
    try relay?.send("TARGET \(daemon.http)")
    let notifications = relay.map { "127.0.0.1:\($0.port)" } ?? daemon.http

    var tenant = Substatus_V1_CreateTenantRequest()
    tenant.name = "lifecycle"
    admin = try await client.call(Substatus_V1_TenantService.createTenant, tenant, key: daemon.operatorKey).adminKey
    var register = Substatus_V1_RegisterAppRequest()
    register.bundleID = Self.bundleID
    register.appleAppID = Self.appleAppID
    app = try #require(try await client.call(Substatus_V1_AdminService.registerApp, register, key: admin).app?.appID)
    var put = Substatus_V1_PutProductsRequest()
    put.appID = app
    put.products = [("pro.monthly", true), ("pro.plus.monthly", false)].map { id, trial in
      var product = Substatus_V1_Product()
      product.productID = id
      product.type = .autoRenewable
      product.subscriptionGroupID = "pro"
      product.duration = "P1M"
      product.hasIntroductoryOffer = trial
      return product
    }
    _ = try await client.call(Substatus_V1_AdminService.putProducts, put, key: admin)
    _ = try await sim.post(
      "/control/apps",
      [
        "bundle_id": Self.bundleID, "apple_app_id": Self.appleAppID, "shared_secret": "unused-by-v2",
        "notification_version": "v2", "grace_period_days": graceDays,
        "notification_url": "http://\(notifications)/v1/apps/\(app)/apple/notifications",
        "products": [
          [
            "product_id": "pro.monthly", "type": "auto_renewable", "subscription_group_id": "pro", "duration": "P1M",
            "level": 2, "price": 9.99, "currency": "USD", "family_shareable": true,
            "introductory_offer": ["type": "free_trial", "duration": "P1W"],
          ],
          [
            "product_id": "pro.plus.monthly", "type": "auto_renewable", "subscription_group_id": "pro",
            "duration": "P1M", "level": 1, "price": 14.99, "currency": "USD",
          ],
        ],
      ])

    var start = Substatus_V1_ListEventsRequest()
    start.appID = app
    startCursor = try await client.call(Substatus_V1_EventService.listEvents, start, key: admin).nextCursor
    var create = Substatus_V1_CreateWebhookRequest()
    create.appID = app
    create.url = "http://127.0.0.1:\(receiver.port)/substatus"
    let created = try await client.call(Substatus_V1_EventService.createWebhook, create, key: admin)
    webhookID = try #require(created.webhook?.webhookID)
    try receiver.send("SECRET \(created.signingSecret)")
  }

  /// Stops everything and removes the directories.
  func stop() {
    client.transport.close()
    daemon.abandon()
    receiver.stop()
    relay?.stop()
    sim.stop()
    try? FileManager.default.removeItem(at: directory)
  }

  /// SIGKILL of substatusd, then a start on the same data (on new ports: the simulator's app is
  /// pointed at the new notification URL, or the ``relay`` at the new substatusd).
  func killAndRestart() async throws {
    await daemon.kill()
    let (arguments, directory) = (daemonArguments, daemon.directory)
    daemon = try await RunningDaemon(store: store, extraArguments: arguments, reusing: directory)
    client.transport.close()
    client = try DaemonClient(daemon)
    if let relay {
      try relay.send("TARGET \(daemon.http)")
      return
    }
    var patch = URLRequest(url: try #require(URL(string: "http://\(sim.address)/control/apps/\(Self.bundleID)")))
    patch.httpMethod = "PATCH"
    patch.httpBody = try JSONSerialization.data(withJSONObject: [
      "notification_url": "http://\(daemon.http)/v1/apps/\(app)/apple/notifications"
    ])
    let (_, patched) = try await URLSession.shared.data(for: patch)
    try #require((patched as? HTTPURLResponse)?.statusCode == 200)
  }

  // MARK: The simulated App Store

  /// Adds a user of the simulated App Store (production).
  func addUser(_ user: String) async throws {
    _ = try await sim.post("/control/users", ["user_id": user, "environment": "production"])
  }

  /// POSTs to one of the user's control paths (`purchase`, `refund`, ...), then waits until the
  /// notifications it caused were delivered to substatusd.
  @discardableResult
  func act(_ user: String, _ action: String, _ body: [String: Any] = ["group_id": "pro"]) async throws -> [String: Any] {
    let answer = try await sim.post("/control/apps/\(Self.bundleID)/users/\(user)/\(action)", body)
    try await sim.drain()
    return answer
  }

  /// Moves the simulated clock (and so substatusd's) forward; the simulator renews, fails to
  /// bill and ends periods on the way, its notifications are delivered and substatusd has read
  /// the new time before this returns.
  ///
  /// With `settling` (the default), it first waits until every event of the log was delivered:
  /// a jump of days while a POST is in flight would time the POST out on the simulated clock
  /// (real time never jumps so), and the receiver would see a retry where it should see one
  /// delivery. Fault tests that keep deliveries pending pass `false`.
  func advance(days: Int64 = 0, ms: Int64 = 0, settling: Bool = true) async throws {
    if settling { try await settle() }
    _ = try await sim.post("/control/clock/advance", ["ms": days * Self.day + ms])
    try await sim.drain()
    try await waitForServerClock(try await simulatedNow())
  }

  /// Moves the simulated clock to `ms`, as ``advance(days:ms:settling:)``.
  func setClock(_ ms: Int64, settling: Bool = true) async throws {
    if settling { try await settle() }
    _ = try await sim.post("/control/clock/set", ["now_ms": ms])
    try await sim.drain()
    try await waitForServerClock(ms)
  }

  /// Waits (10 s at most) until every event of the log has a delivered delivery, on three readings
  /// 600 ms apart: the transition scheduler appends an event just after substatusd's followed
  /// clock reads a move (its pass may lag on a loaded machine), and a delivery still in flight
  /// when the clock then jumps days ahead would time out past its retry window (FAILED after one
  /// attempt).
  func settle() async throws {
    let deadline = Date().addingTimeInterval(10)
    var quiet = 0
    while true {
      let (events, all) = (try await log().count, try await deliveries())
      if all.count >= events && all.allSatisfy({ $0.state == .delivered }) {
        quiet += 1
        if quiet == 3 { return }
        try await Task.sleep(for: .milliseconds(600))
        continue
      }
      quiet = 0
      guard Date() < deadline else { throw DaemonFailure("not delivered: \(all.map { "\($0.state) \($0.attempts.count)" })") }
      try await Task.sleep(for: .milliseconds(10))
    }
  }

  /// Waits (5 s at most) until substatusd's clock reads `ms` or later: it polls the simulator's
  /// every 20 ms, so a test that moves the time in quick steps waits for each to be seen (the
  /// instant a `GetStatus` is evaluated at is the server's now).
  func waitForServerClock(_ ms: Int64) async throws {
    var request = Substatus_V1_GetStatusRequest()
    request.appID = app
    request.userID = "clock-probe"
    guard try await waitUntil(timeout: .seconds(5), { try await client.call(Substatus_V1_StatusService.getStatus, request, key: admin).asOfMs >= ms })
    else { throw DaemonFailure("substatusd's clock did not reach \(ms)") }
  }

  /// The simulated clock now.
  func simulatedNow() async throws -> Int64 {
    try #require(try await sim.get("/control/clock")["now_ms"]?.int64Value)
  }

  /// The user's transactions as StoreKit 2 decodes them (Apple's data: ids, dates, offers, prices).
  func transactions(of user: String) async throws -> [JSONValue] {
    try await sim.get("/control/apps/\(Self.bundleID)/users/\(user)/signed-transactions")["transactions"]?.arrayValue ?? []
  }

  /// substatusd's user id of the user's subscription: the V2 notifications arrive before the app
  /// said who bought, so it is the pseudo-user of the original transaction.
  func substatusUser(of user: String) async throws -> String {
    let first = try #require(try await transactions(of: user).first?["originalTransactionId"]?.stringValue)
    return "apple:\(first)"
  }

  // MARK: What substatusd tells

  /// The app's whole log, in order.
  func log(user: String? = nil) async throws -> [Substatus_V1_Event] {
    var request = Substatus_V1_ListEventsRequest()
    request.appID = app
    request.limit = 1000
    if let user { request.userID = user }
    return try await client.call(Substatus_V1_EventService.listEvents, request, key: admin).events
  }

  /// `WatchEvents` from the start of the log: the first `count` events.
  func watch(count: Int) async throws -> [Substatus_V1_Event] {
    var request = Substatus_V1_WatchEventsRequest()
    request.appID = app
    request.sinceCursor = startCursor
    var metadata: Metadata = [:]
    metadata.addString("Bearer \(admin)", forKey: "authorization")
    let stream = try await client.client.serverStreaming(
      method: Substatus_V1_EventService.watchEvents.path, request: request,
      response: Substatus_V1_WatchEventsResponse.self, metadata: metadata)
    var iterator = stream.makeAsyncIterator()
    var events: [Substatus_V1_Event] = []
    while events.count < count, let message = try await iterator.next() {
      if let event = message.event { events.append(event) }
    }
    return events
  }

  /// The deliveries of the webhook, oldest first.
  func deliveries() async throws -> [Substatus_V1_Delivery] {
    var request = Substatus_V1_ListDeliveriesRequest()
    request.appID = app
    request.webhookID = webhookID
    request.pageSize = 1000
    return try await client.call(Substatus_V1_EventService.listDeliveries, request, key: admin).deliveries
  }

  /// Waits (10 s at most) until every delivery of the webhook is delivered: a receiver's answer
  /// is recorded by substatusd just after the receiver reports it.
  func waitForAllDelivered() async throws -> Bool {
    try await waitUntil(every: .milliseconds(20)) { try await deliveries().allSatisfy({ $0.state == .delivered }) }
  }

  /// Moves the simulated clock to `ms` without moving it while a POST is in flight: each user's
  /// oldest pending delivery that is due by `ms` is attempted, and its attempt recorded, before
  /// this returns (a jump past the claim's lease while a POST is in flight would let the claim
  /// be taken again: real time never jumps so).
  func stepDeliveries(to ms: Int64) async throws {
    var oldest: [String: Substatus_V1_Delivery] = [:]
    for delivery in try await deliveries().sorted(by: { $0.createdMs < $1.createdMs }) where delivery.state == .pending {
      let user = delivery.event?.userID ?? ""
      if oldest[user] == nil { oldest[user] = delivery }
    }
    let due = oldest.values.filter { $0.nextAttemptMs <= ms }
    try await setClock(ms, settling: false)
    let attempted = try await waitUntil(every: .milliseconds(10)) {
      let now = try await deliveries()
      return due.allSatisfy { before in
        now.contains { $0.deliveryID == before.deliveryID && $0.attempts.count > before.attempts.count }
      }
    }
    guard attempted else { throw DaemonFailure("deliveries due at \(ms) were not attempted") }
  }

  /// `GetTrends` by day over `[start, start + days)`.
  func trends(days: Int64) async throws -> [Substatus_V1_TrendBucket] {
    var request = Substatus_V1_GetTrendsRequest()
    request.appID = app
    request.fromMs = Self.start
    request.toMs = Self.start + days * Self.day
    request.interval = .day
    return try await client.call(Substatus_V1_ReportService.getTrends, request, key: admin).buckets
  }

  /// The events the receiver accepted (signed, 200), the first acceptance of each, in arrival
  /// order (the receiver's `dup` marks an id it saw before, perhaps in a request it could not
  /// answer).
  func received(user: String? = nil) -> [Substatus_V1_Event] {
    var seen = Set<String>()
    return receiver.records.filter { $0.status == 200 && $0.valid }.compactMap { record in
      guard let event = record.event, seen.insert(event.eventID).inserted, user == nil || event.userID == user else {
        return nil
      }
      return event
    }
  }

  /// Waits (a few seconds at most) until the receiver accepted `count` events of `user` (all users: nil).
  func waitForReceived(_ count: Int, user: String? = nil) async -> Bool {
    await receiver.waitUntil(timeout: 10) { _ in self.received(user: user).count >= count }
  }
}

extension Substatus_V1_Event {
  /// The event in one line, times relative to ``LifecycleRig/start`` (in ms), without ids:
  /// what the lifecycle tests compare.
  var line: String {
    func name(_ value: some ProtobufEnum, dropping prefix: String) -> String {
      String((value.protoName ?? "\(value.rawValue)").dropFirst(prefix.count))
    }
    var parts = [
      name(type, dropping: "EVENT_TYPE_"), "at +\(occurredMs - LifecycleRig.start)", productID,
      "\(name(stateBefore, dropping: "SUBSCRIPTION_STATE_"))->\(name(stateAfter, dropping: "SUBSCRIPTION_STATE_"))",
    ]
    if offer != .unspecified { parts.append("offer \(name(offer, dropping: "EVENT_OFFER_"))") }
    if priceMilliunits != 0 || !currency.isEmpty { parts.append("\(priceMilliunits) \(currency)") }
    if !expirationReason.isEmpty { parts.append("reason \(expirationReason)") }
    if !previousProductID.isEmpty { parts.append("from \(previousProductID)") }
    return parts.joined(separator: " ")
  }
}
