import Foundation
import SubstatusJSON
import SubstatusWire
import Testing

/// `substatus report trends` against a real substatusd fed by the App Store simulator's V2
/// notifications: a free trial that converts and renews, a yearly subscription in euros, a refund
/// and a voluntary expiry, counted from the event log the daemon writes as it stores them.
@Suite(.serialized) struct TrendsEndToEndTests {
  static let day: Int64 = 86_400_000

  @Test func trendsOfSimulatedLifecyclesFromTheCLI() async throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("trends-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let rootFile = directory.appendingPathComponent("sim-root.pem").path
    // The simulated clock starts at a UTC midnight 60 days ago, so that 42 days of it are past.
    let nowMs = Int64(Date().timeIntervalSince1970 * 1000)
    let start = (nowMs / Self.day - 60) * Self.day
    let sim = try await RunningSimulator(extraArguments: ["--root-ca-out", rootFile, "--start-ms", String(start)])
    defer { sim.stop() }
    let daemon = try await RunningDaemon(extraArguments: ["--apple-root-ca", rootFile])
    defer { daemon.abandon() }
    let cli = try builtExecutable("substatus")
    func substatus(_ arguments: [String], key: String) async throws -> String {
      let (code, out, err) = try await run(cli, arguments + ["--addr", daemon.grpc, "--key", key, "--timeout", "10"])
      #expect(code == 0, "substatus \(arguments.joined(separator: " ")): \(err)")
      return out
    }

    let bundleID = "com.example.trends"
    let appleAppID: Int64 = 6_400_000_091
    let tenant = try await substatus(["tenant", "create", "trends", "--json"], key: daemon.operatorKey)
    let admin = try Substatus_V1_CreateTenantResponse(jsonString: tenant).adminKey
    let registered = try await substatus(
      ["app", "register", "--bundle-id", bundleID, "--apple-app-id", String(appleAppID), "--json"], key: admin)
    let app = try #require(try Substatus_V1_RegisterAppResponse(jsonString: registered).app?.appID)
    let catalog = directory.appendingPathComponent("catalog.json")
    try Data(
      #"""
      {"products":[
       {"productId":"premium.monthly","type":"PRODUCT_TYPE_AUTO_RENEWABLE","subscriptionGroupId":"pro","duration":"P1M","hasIntroductoryOffer":true},
       {"productId":"basic.yearly","type":"PRODUCT_TYPE_AUTO_RENEWABLE","subscriptionGroupId":"basic","duration":"P1Y"}]}
      """#.utf8
    ).write(to: catalog)
    _ = try await substatus(["product", "put", app, "--file", catalog.path], key: admin)
    _ = try await sim.post(
      "/control/apps",
      [
        "bundle_id": bundleID, "apple_app_id": appleAppID, "shared_secret": "unused-by-v2",
        "notification_version": "v2", "notification_url": "http://\(daemon.http)/v1/apps/\(app)/apple/notifications",
        "products": [
          [
            "product_id": "premium.monthly", "type": "auto_renewable", "subscription_group_id": "pro",
            "duration": "P1M", "price": 9.99, "currency": "USD",
            "introductory_offer": ["type": "free_trial", "duration": "P1W"],
          ],
          [
            "product_id": "basic.yearly", "type": "auto_renewable", "subscription_group_id": "basic",
            "duration": "P1Y", "price": 49.99, "currency": "EUR",
          ],
        ],
      ])
    for user in ["trialist", "euro", "refunder", "leaver"] {
      _ = try await sim.post("/control/users", ["user_id": user, "environment": "production"])
    }
    let users = "/control/apps/\(bundleID)/users"
    // Day 0: a free trial, a yearly in euros, two monthly subscriptions at the regular price; the
    // leaver turns auto-renew off at once.
    _ = try await sim.post("\(users)/trialist/purchase", ["product_id": "premium.monthly", "offer": ["type": "introductory"]])
    _ = try await sim.post("\(users)/euro/purchase", ["product_id": "basic.yearly"])
    _ = try await sim.post("\(users)/refunder/purchase", ["product_id": "premium.monthly"])
    _ = try await sim.post("\(users)/leaver/purchase", ["product_id": "premium.monthly"])
    _ = try await sim.post("\(users)/leaver/cancel-auto-renew", ["group_id": "pro"])
    try await sim.drain()
    // Day 2: Apple refunds the refunder.
    _ = try await sim.post("/control/clock/advance", ["days": 2])
    _ = try await sim.post("\(users)/refunder/refund", ["group_id": "pro"])
    try await sim.drain()
    // Day 7 the trial converts; about day 31 the leaver's month expires; about day 38 the trialist
    // renews.
    for _ in 0..<4 {
      _ = try await sim.post("/control/clock/advance", ["days": 10])
      try await sim.drain()
    }

    let from = Self.date(start)
    let to = Self.date(start + 42 * Self.day)
    let json = try await substatus(["report", "trends", app, "--from", from, "--to", to, "--json"], key: admin)
    let trends = try Substatus_V1_GetTrendsResponse(jsonString: json)
    let buckets = trends.buckets
    try #require(buckets.count == 42)
    #expect(buckets.first?.startMs == start)
    #expect(trends.currencies == ["EUR", "USD"])
    func sum(_ value: (Substatus_V1_TrendBucket) -> Int64) -> Int64 { buckets.map(value).reduce(0, +) }
    func total(_ currency: String, _ amounts: (Substatus_V1_TrendBucket) -> [Substatus_V1_CurrencyAmount]) -> Int64 {
      buckets.flatMap(amounts).filter { $0.currency == currency }.map(\.amountMilliunits).reduce(0, +)
    }
    // Day 0.
    #expect(buckets[0].trialsStarted == 1)
    #expect(buckets[0].newPaidSubscriptions == 3)
    #expect(buckets[0].activeSubscribers == 4)
    #expect(buckets[0].activeTrials == 1)
    // Day 2: the refund.
    #expect(buckets[2].refunds == 1)
    #expect(buckets[2].refundedRevenue.map(\.amountMilliunits) == [9990])
    #expect(buckets[2].activeSubscribers == 3)
    // Day 7: the conversion.
    #expect(buckets[7].trialsConverted == 1)
    #expect(buckets[7].trialConversionRate == 1)
    #expect(buckets[7].activeTrials == 0)
    // Over the range: one voluntary churn, one renewal, every price once.
    #expect(sum(\.churned) == 1)
    #expect(sum(\.renewals) == 1)
    #expect(sum(\.trialsStarted) == 1 && sum(\.trialsConverted) == 1 && sum(\.trialsLapsed) == 0)
    #expect(sum(\.unpricedPurchases) == 0)
    #expect(total("USD", \.revenue) == 4 * 9990)  // the leaver, the refunder, the conversion, the renewal
    #expect(total("EUR", \.revenue) == 49990)
    // At the end: the trialist (monthly) and the yearly in euros (49.99 / 12).
    let last = try #require(buckets.last)
    #expect(last.activeSubscribers == 2)
    #expect(last.mrr.map(\.currency) == ["EUR", "USD"])
    #expect(last.mrr.map(\.amountMilliunits) == [4166, 9990])
    #expect(last.mrrUnpricedSubscriptions == 0)

    // The same series as a table and as CSV.
    let table = try await substatus(["report", "trends", app, "--from", from, "--to", to], key: admin)
    #expect(table.contains("interval     DAY (42 buckets)"))
    #expect(table.contains("numbers for the last 12 of 42 buckets"))
    let activeRow = try #require(table.split(separator: "\n").first { $0.hasPrefix("active subscribers ") })
    #expect(activeRow.contains("█"))
    let csv = try await substatus(["report", "trends", app, "--from", from, "--to", to, "--csv"], key: admin)
    let rows = csv.split(separator: "\r\n")
    #expect(rows.count == 43)
    #expect(rows.first?.hasPrefix("start,end,active_subscribers,") == true)
    #expect(rows[1].hasPrefix("\(from),\(Self.date(start + Self.day)),4,1,1,0,0,0.0000,3,"))

    // Weekly and monthly buckets count the same flows.
    for interval in ["week", "month"] {
      let other = try Substatus_V1_GetTrendsResponse(
        jsonString: try await substatus(
          ["report", "trends", app, "--from", from, "--to", to, "--interval", interval, "--json"], key: admin))
      #expect(other.buckets.map(\.newPaidSubscriptions).reduce(0, +) == 3, "\(interval)")
      #expect(other.buckets.last?.activeSubscribers == 2, "\(interval)")
      #expect(other.buckets.last?.endMs == start + 42 * Self.day, "\(interval)")
    }
  }

  /// A UTC midnight as `YYYY-MM-DD`.
  static func date(_ ms: Int64) -> String {
    var calendar = Calendar(identifier: .gregorian)
    calendar.timeZone = TimeZone(identifier: "UTC")!
    let parts = calendar.dateComponents([.year, .month, .day], from: Date(timeIntervalSince1970: Double(ms) / 1000))
    return String(format: "%04d-%02d-%02d", parts.year!, parts.month!, parts.day!)
  }
}
