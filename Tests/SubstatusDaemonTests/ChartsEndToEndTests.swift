import Foundation
import SubstatusJSON
import SubstatusWire
import Testing

/// `substatus report chart` against a real substatusd fed by the App Store simulator's V2
/// notifications (a free trial that converts and renews, a yearly subscription in euros, a
/// refund), and `substatus app update --small-business` changing the proceeds.
@Suite(.serialized) struct ChartsEndToEndTests {
  static let day: Int64 = 86_400_000

  @Test func chartsOfSimulatedLifecyclesFromTheCLI() async throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("charts-\(UUID().uuidString)")
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
    func substatus(_ arguments: [String], key: String, expect expected: Int32 = 0) async throws -> (String, String) {
      let (code, out, err) = try await run(cli, arguments + ["--addr", daemon.grpc, "--key", key, "--timeout", "10"])
      #expect(code == expected, "substatus \(arguments.joined(separator: " ")): \(err)")
      return (out, err)
    }

    let bundleID = "com.example.charts"
    let appleAppID: Int64 = 6_400_000_092
    let tenant = try await substatus(["tenant", "create", "charts", "--json"], key: daemon.operatorKey).0
    let admin = try Substatus_V1_CreateTenantResponse(jsonString: tenant).adminKey
    let registered = try await substatus(
      ["app", "register", "--bundle-id", bundleID, "--apple-app-id", String(appleAppID), "--json"], key: admin).0
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
    for user in ["trialist", "euro", "refunder"] {
      _ = try await sim.post("/control/users", ["user_id": user, "environment": "production"])
    }
    let users = "/control/apps/\(bundleID)/users"
    // Day 0: a free trial, a yearly in euros, a monthly at the regular price.
    _ = try await sim.post("\(users)/trialist/purchase", ["product_id": "premium.monthly", "offer": ["type": "introductory"]])
    _ = try await sim.post("\(users)/euro/purchase", ["product_id": "basic.yearly"])
    _ = try await sim.post("\(users)/refunder/purchase", ["product_id": "premium.monthly"])
    try await sim.drain()
    // Day 2: Apple refunds the refunder.
    _ = try await sim.post("/control/clock/advance", ["days": 2])
    _ = try await sim.post("\(users)/refunder/refund", ["group_id": "pro"])
    try await sim.drain()
    // Day 7 the trial converts; about day 38 it renews.
    for _ in 0..<4 {
      _ = try await sim.post("/control/clock/advance", ["days": 10])
      try await sim.drain()
    }

    let from = TrendsEndToEndTests.date(start)
    let to = TrendsEndToEndTests.date(start + 42 * Self.day)
    func chart(_ name: String, _ extra: [String] = []) async throws -> Substatus_V1_GetChartResponse {
      let json = try await substatus(["report", "chart", app, name, "--from", from, "--to", to, "--json"] + extra, key: admin).0
      return try Substatus_V1_GetChartResponse(jsonString: json)
    }
    func total(_ response: Substatus_V1_GetChartResponse, _ name: String, _ currency: String = "") -> Int64 {
      response.series.filter { $0.name == name && $0.currency == currency }.flatMap(\.values).reduce(0, +)
    }

    // MRR movement: the refunder (9.99, day 0) and the conversion (day 7) are new, the refund churns;
    // the euro yearly is new at 49.99 / 12.
    let movement = try await chart("mrr-movement")
    #expect(movement.buckets.count == 42 && movement.buckets.first?.startMs == start)
    #expect(movement.currencies == ["EUR", "USD"])
    #expect(total(movement, "new", "USD") == 2 * 9990)
    #expect(total(movement, "churn", "USD") == -9990)
    #expect(total(movement, "net", "USD") == 9990)
    #expect(total(movement, "new", "EUR") == 4166)
    let mrr = try await chart("mrr")
    #expect(mrr.series.filter { $0.name == "mrr" }.map { $0.values.last } == [4166, 9990])

    // Revenue and proceeds at 30 %: the refunder, the conversion and the renewal in dollars, less the refund.
    let revenue = try await chart("revenue")
    #expect(total(revenue, "revenue", "USD") == 3 * 9990)
    #expect(total(revenue, "refunds", "USD") == 9990)
    #expect(total(revenue, "proceeds", "USD") == 2 * 6993)
    #expect(total(revenue, "proceeds", "EUR") == 34993)
    let actives = try await chart("actives-movement", ["--interval", "week"])
    #expect(total(actives, "new") == 2 && total(actives, "converted") == 1 && total(actives, "churned") == -1)
    #expect(actives.series.first { $0.name == "actives" }?.values.last == 2)

    // The app joins the Small Business Program: 15 % on every sale.
    let shown = try await substatus(["app", "update", app, "--small-business", "true"], key: admin).0
    #expect(shown.contains("15 % (App Store Small Business Program)"))
    let member = try await chart("revenue")
    #expect(total(member, "proceeds", "USD") == 2 * 8492)
    #expect(total(member, "proceeds", "EUR") == 42492)

    // The table and the CSV.
    let table = try await substatus(["report", "chart", app, "mrr-movement", "--from", from, "--to", to], key: admin).0
    #expect(table.contains("chart        mrr-movement"))
    #expect(table.contains("numbers for the last 12 of 42 buckets"))
    #expect(table.split(separator: "\n").contains { $0.hasPrefix("new_USD ") })
    let csv = try await substatus(
      ["report", "chart", app, "revenue", "--from", from, "--to", to, "--interval", "month", "--csv"], key: admin).0
    let rows = csv.split(separator: "\r\n")
    #expect(
      rows.first
        == "start,end,revenue_EUR,refunds_EUR,net_revenue_EUR,proceeds_EUR,revenue_USD,refunds_USD,net_revenue_USD,proceeds_USD")
    #expect(rows.count >= 3)
    // Usage errors: an unknown chart, --csv with --json.
    let unknown = try await substatus(
      ["report", "chart", app, "arr", "--from", from, "--to", to], key: admin, expect: 2).1
    #expect(unknown.contains("unknown chart 'arr'"))
  }
}
