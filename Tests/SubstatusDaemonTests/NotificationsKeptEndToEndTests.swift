import Foundation
import SubstatusJSON
import SubstatusProcessTestKit
import SubstatusWire
import Testing

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// Rule 25 (docs/architecture.md "Domain rules"): every V2 notification is kept. The App Store
/// simulator signs and sends each type to a real substatusd, on SQLite and on PostgreSQL; the
/// answers, the kept rows (read with `sqlite3` or `psql`), `/metrics` and the events read with the
/// `substatus` CLI say what happened to each.
@Suite(.serialized) struct NotificationsKeptEndToEndTests {
  /// `substatus events list APP --type TYPES [--user USER] --json`.
  static func events(_ rig: LifecycleRig, types: String, user: String? = nil) async throws -> [Substatus_V1_Event] {
    let extra = user.map { ["--user", $0] } ?? []
    let out = try await Apple2026EndToEndTests.cli(rig, ["events", "list", rig.app, "--type", types] + extra)
    return try Substatus_V1_ListEventsResponse(jsonString: out).events
  }

  /// `query` on substatusd's database with its store's client (`sqlite3`, read while it runs:
  /// WAL; or `psql`).
  static func sql(_ rig: LifecycleRig, _ query: String) async throws -> [String] {
    try await rig.daemon.sql(query)
  }

  /// Every delivery of the simulator was answered 200.
  static func expectAllAnswered200(_ rig: LifecycleRig) async throws -> [JSONValue] {
    let all = try #require(try await rig.sim.get("/control/notifications")["notifications"]?.arrayValue)
    for n in all {
      #expect(n["state"]?.stringValue == "delivered", "\(n)")
      #expect(n["attempts"]?.arrayValue?.last?["http_status"]?.int64Value == 200, "\(n)")
    }
    return all
  }

  /// Types substatusd does not know, the Advanced Commerce API's and an External Purchase token
  /// are verified, kept (once per notificationUUID), answered 200 and logged as APPLE_NOTIFICATION
  /// events with their type and subtype (the token's without a user); the unknown type is counted
  /// in /metrics; a notification delivered again is answered and changes nothing.
  @Test(arguments: TestStore.userLevel) func everyTypeIsKeptAnsweredAndLogged(store: TestStore) async throws {
    let rig = try await LifecycleRig(store: store)
    defer { rig.stop() }
    try await rig.addUser("ann")
    try await rig.act("ann", "purchase", ["product_id": "pro.plus.monthly"])
    let user = try await rig.substatusUser(of: "ann")
    try await rig.act("ann", "notify", ["notification_type": "FUTURE_TYPE", "subtype": "SOMETHING_NEW", "group_id": "pro"])
    try await rig.act("ann", "notify", ["notification_type": "METADATA_UPDATE", "group_id": "pro"])
    _ = try await rig.sim.post("/control/apps/\(LifecycleRig.bundleID)/external-purchase-tokens", ["subtype": "CREATED"])
    try await rig.sim.drain()
    let delivered = try await Self.expectAllAnswered200(rig)
    #expect(delivered.count == 4)

    let kept = try await Self.sql(rig, "SELECT notification_type || '/' || coalesce(subtype, '') FROM kept_notifications ORDER BY sequence")
    #expect(kept == ["SUBSCRIBED/INITIAL_BUY", "FUTURE_TYPE/SOMETHING_NEW", "METADATA_UPDATE/", "EXTERNAL_PURCHASE_TOKEN/CREATED"], "\(kept)")
    let uuids = try await Self.sql(rig, "SELECT notification_uuid FROM kept_notifications ORDER BY sequence")
    #expect(Set(uuids) == Set(delivered.compactMap { $0["notification_uuid"]?.stringValue }))

    let logged = try await Self.events(rig, types: "APPLE_NOTIFICATION")
    try #require(logged.map(\.notificationType) == ["FUTURE_TYPE", "METADATA_UPDATE", "EXTERNAL_PURCHASE_TOKEN"], "\(logged)")
    #expect(logged[0].userID == user && logged[0].notificationSubtype == "SOMETHING_NEW" && !logged[0].transactionID.isEmpty)
    #expect(logged[0].subscriptionGroupID == "pro" && logged[0].productID == "pro.plus.monthly")
    #expect(logged[1].userID == user)
    #expect(logged[2].userID.isEmpty && logged[2].notificationSubtype == "CREATED")
    // The purchase's notification causes the derived event only.
    #expect(try await Self.events(rig, types: "SUBSCRIPTION_STARTED").count == 1)

    var metrics = URLRequest(url: try #require(URL(string: "http://\(rig.daemon.http)/metrics")))
    metrics.httpMethod = "GET"
    let (body, _) = try await URLSession.shared.data(for: metrics)
    let text = String(decoding: body, as: UTF8.self)
    #expect(text.contains("substatus_unknown_notification_types_total{type=\"FUTURE_TYPE\"} 1"), "\(text.suffix(2000))")
    #expect(!text.contains("substatus_unknown_notification_types_total{type=\"METADATA_UPDATE\"}"))

    // Apple delivers the unknown one again: 200, kept once, no new event, counted once.
    let signed = try #require(try await Self.sql(rig, "SELECT signed_payload FROM kept_notifications WHERE notification_type = 'FUTURE_TYPE'").first)
    let (status, answer) = try await postJSON(
      "http://\(rig.daemon.http)/v1/apps/\(rig.app)/apple/notifications", .object(["signedPayload": .string(signed)]))
    #expect(status == 200 && answer?["status"]?.stringValue == "duplicate", "\(String(describing: answer))")
    #expect(try await Self.sql(rig, "SELECT count(*) FROM kept_notifications") == ["4"])
    #expect(try await Self.events(rig, types: "APPLE_NOTIFICATION").count == 3)
    // Every event reached the app's webhook (the new types, and the one without a user, too).
    try await rig.settle()
  }
}

extension NotificationsKeptEndToEndTests {
  /// ONE_TIME_CHARGE is a purchase like any other (its transaction ingested, ONE_TIME_PURCHASED);
  /// RENEWAL_EXTENDED (the simulator's Extend a Subscription Renewal Date) moves the period's end:
  /// status answers the new expiry, the subscription is still active past the old one with no
  /// renewal or expiry logged, and SUBSCRIPTION_EXTENDED says when and which transaction.
  @Test(arguments: TestStore.userLevel) func oneTimeChargeIsAPurchaseAndRenewalExtendedExtendsThePeriod(store: TestStore) async throws {
    let rig = try await LifecycleRig(store: store)
    defer { rig.stop() }
    let day = LifecycleRig.day
    var patch = URLRequest(url: try #require(URL(string: "http://\(rig.sim.address)/control/apps/\(LifecycleRig.bundleID)")))
    patch.httpMethod = "PATCH"
    patch.httpBody = try JSONSerialization.data(withJSONObject: [
      "products": [["product_id": "lifetime", "type": "non_consumable", "price": 29.99, "currency": "USD"]]
    ])
    let (_, patched) = try await URLSession.shared.data(for: patch)
    try #require((patched as? HTTPURLResponse)?.statusCode == 200)
    let catalog = rig.directory.appendingPathComponent("lifetime.json")
    try #"{"products":[{"productId":"lifetime","type":"PRODUCT_TYPE_NON_CONSUMABLE"}]}"#.write(
      to: catalog, atomically: true, encoding: .utf8)
    _ = try await Apple2026EndToEndTests.cli(rig, ["product", "put", rig.app, "--file", catalog.path])

    try await rig.addUser("ann")
    try await rig.act("ann", "purchase", ["product_id": "pro.plus.monthly"])
    let user = try await rig.substatusUser(of: "ann")
    try await rig.act("ann", "purchase", ["product_id": "lifetime"])
    let bought = try await Self.events(rig, types: "ONE_TIME_PURCHASED")
    #expect(bought.count == 1 && bought.first?.productID == "lifetime", "\(bought)")
    #expect(bought.first?.priceMilliunits == 29_990 && bought.first?.currency == "USD")
    #expect(try await Self.sql(rig, "SELECT notification_type FROM kept_notifications ORDER BY sequence") == ["SUBSCRIBED", "ONE_TIME_CHARGE"])

    try await rig.advance(days: 1)
    let before = try await Apple2026EndToEndTests.status(rig, user)
    #expect(before.state == .active, "\(before)")
    try await rig.act("ann", "extend-renewal", ["group_id": "pro", "days": 10])
    _ = try await Self.expectAllAnswered200(rig)
    let extended = try await Self.events(rig, types: "SUBSCRIPTION_EXTENDED")
    #expect(extended.count == 1, "\(extended)")
    #expect(extended.first?.userID == user && extended.first?.notificationType == "RENEWAL_EXTENDED")
    #expect(extended.first?.productID == "pro.plus.monthly" && extended.first?.subscriptionGroupID == "pro")
    #expect(extended.first?.occurredMs == LifecycleRig.start + day)
    let after = try await Apple2026EndToEndTests.status(rig, user)
    #expect(after.expiresMs == before.expiresMs + 10 * day, "\(after)")
    // Past the old end, before the new one: still the same paid period.
    try await rig.setClock(before.expiresMs + 2 * day)
    let later = try await Apple2026EndToEndTests.status(rig, user)
    #expect(later.state == .active && later.expiresMs == before.expiresMs + 10 * day, "\(later)")
    #expect(try await Self.events(rig, types: "RENEWED,EXPIRED,BILLING_ISSUE").isEmpty)
    try await rig.settle()
  }

  /// RESCIND_CONSENT carries the child's signed AppTransaction: substatusd finds the app users
  /// linked to its Apple Account (two devices of one account here), logs CONSENT_RESCINDED for
  /// each, and, with `app set-policy --erase-on-rescind-consent true`, erases them as `user delete`
  /// does first. Without the policy their data stays; another account's users are untouched.
  @Test(arguments: TestStore.userLevel) func rescindConsentFindsTheAccountsUsersAndErasesThemUnderThePolicy(store: TestStore) async throws {
    let rig = try await LifecycleRig(store: store)
    defer { rig.stop() }
    let (start, day) = (LifecycleRig.start, LifecycleRig.day)
    func link(_ customer: String, as users: [String]) async throws {
      try await rig.addUser(customer)
      let download = try await rig.sim.post("/control/apps/\(LifecycleRig.bundleID)/users/\(customer)/app-download", [:])
      let file = rig.directory.appendingPathComponent("\(customer).jws")
      try #require(download["signed_app_transaction"] as? String).write(to: file, atomically: true, encoding: .utf8)
      for user in users {
        _ = try await Apple2026EndToEndTests.cli(rig, ["app-transaction", "submit", rig.app, user, "--file", file.path])
        try await SummaryEndToEndTests.importTransaction(
          rig.client, key: rig.admin, app: rig.app, user: user, id: "tx-\(user)", purchasedMs: start,
          expiresMs: start + 30 * day, signedMs: start)
      }
    }
    try await link("kid", as: ["u-kid", "u-kid-tablet"])
    try await link("other", as: ["u-other"])

    // Without the policy: the event only.
    try await rig.act("other", "rescind-consent")
    let first = try await Self.events(rig, types: "CONSENT_RESCINDED")
    #expect(first.map(\.userID) == ["u-other"], "\(first)")
    #expect(first.first?.notificationType == "RESCIND_CONSENT" && first.first?.occurredMs == start)
    #expect(try await Self.sql(rig, "SELECT count(*) FROM app_accounts WHERE user_id = 'u-other'") == ["1"])
    #expect(try await Self.events(rig, types: "SUBSCRIPTION_STARTED", user: "u-other").count == 1)

    let shown = try await Apple2026EndToEndTests.cli(rig, ["app", "set-policy", rig.app, "--erase-on-rescind-consent", "true"])
    #expect(shown.contains("\"eraseOnRescindConsent\": true") || shown.contains("\"eraseOnRescindConsent\":true"), "\(shown)")
    try await rig.act("kid", "rescind-consent")
    _ = try await Self.expectAllAnswered200(rig)
    let all = try await Self.events(rig, types: "CONSENT_RESCINDED")
    #expect(all.map(\.userID) == ["u-other", "u-kid", "u-kid-tablet"], "\(all)")
    for user in ["u-kid", "u-kid-tablet"] {
      // Erased as DeleteUser erases: the history and the earlier events are gone; the event stays.
      let history = try await Apple2026EndToEndTests.cli(rig, ["history", rig.app, user])
      #expect(try Substatus_V1_GetTransactionHistoryResponse(jsonString: history).transactions.isEmpty, "\(history)")
      let left = try await Self.events(rig, types: "SUBSCRIPTION_STARTED,CONSENT_RESCINDED", user: user)
      #expect(left.map(\.type) == [.consentRescinded], "\(left)")
    }
    #expect(try await Self.sql(rig, "SELECT user_id FROM app_accounts ORDER BY user_id") == ["u-other"])
    #expect(try await Self.events(rig, types: "SUBSCRIPTION_STARTED", user: "u-other").count == 1)
    try await rig.settle()
  }
}
