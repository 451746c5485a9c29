import Foundation
import Testing
import RPCCore
import SubstatusWire
import SubscriptionDomain
import SubscriptionStorage
import SubscriptionStorageSQLite
@testable import SubstatusService

/// 2024-01-01T00:00:00Z in milliseconds, and a day.
private let jan1: Int64 = 1_704_067_200_000
private let day: Int64 = 86_400_000

@Suite("ReportService.GetChart: requests")
struct ChartRequestTests {
  private func chart(
    _ h: Harness, _ admin: String, _ app: String, _ build: (inout Substatus_V1_GetChartRequest) -> Void
  ) async throws -> Substatus_V1_GetChartResponse {
    var request = Substatus_V1_GetChartRequest()
    request.appID = app
    request.chart = .mrr
    request.fromMs = jan1
    request.toMs = jan1 + 7 * day
    build(&request)
    return try await h.call(Substatus_V1_ReportService.getChart, request, key: admin)
  }

  /// A bad request, by case name, and the field its error names.
  private static func bad(_ name: String, _ r: inout Substatus_V1_GetChartRequest) {
    var filters = Substatus_V1_ChartFilters()
    switch name {
    case "unspecified chart": r.chart = .unspecified
    case "unknown chart": r.chart = .UNRECOGNIZED(42)
    case "from not a midnight": r.fromMs = jan1 + 1
    case "empty range": r.toMs = jan1
    case "1,001 days": r.toMs = jan1 + 1001 * day
    case "unknown interval": r.interval = .UNRECOGNIZED(9)
    case "unknown environment": r.environment = .UNRECOGNIZED(7)
    case "empty product id":
      filters.productIDs = ["premium.monthly", ""]
      r.filters = filters
    case "empty group id":
      filters.subscriptionGroupIDs = [""]
      r.filters = filters
    default: Issue.record("unknown case \(name)")
    }
  }

  @Test(
    "bad input is INVALID_ARGUMENT naming the field",
    arguments: [
      ("unspecified chart", "chart"), ("unknown chart", "chart"), ("from not a midnight", "from_ms"),
      ("empty range", "to_ms"), ("1,001 days", "interval"), ("unknown interval", "interval"),
      ("unknown environment", "environment"), ("empty product id", "filters.product_ids"),
      ("empty group id", "filters.subscription_group_ids"),
    ])
  func invalid(name: String, field: String) async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let error = await #expect(throws: RPCError.self) { try await chart(h, admin, app) { Self.bad(name, &$0) } }
      #expect(error?.code == .invalidArgument)
      #expect(try violatedField(error) == field)
    }
  }

  @Test("another tenant's app is NOT_FOUND")
  func otherTenant() async throws {
    try await withService { h in
      let (_, app) = try await h.makeTenantWithApp()
      let (otherAdmin, _) = try await h.makeTenantWithApp(name: "other", bundleID: "com.other.app")
      let error = await #expect(throws: RPCError.self) { try await chart(h, otherAdmin, app) { _ in } }
      #expect(error?.code == .notFound)
    }
  }
}

@Suite("ReportService.GetChart: counted from the event log of a real SQLite store")
struct ChartStoreTests {
  private static func transaction(
    _ id: String, original: String, _ product: String, from: Int64, to: Int64, price: Int64, currency: String,
    trial: Bool = false
  ) -> Substatus_V1_Transaction {
    var t = Substatus_V1_Transaction()
    t.transactionID = id
    t.originalTransactionID = original
    t.productID = product
    t.purchaseDateMs = from
    t.originalPurchaseDateMs = from
    t.expiresDateMs = to
    t.priceMilliunits = price
    t.currency = currency
    t.isTrialPeriod = trial
    return t
  }

  private static func d(_ month: Int64, _ day: Int64) -> Int64 {
    let daysBeforeMonth: [Int64] = [0, 31, 60, 91, 121]  // 2024, a leap year
    return jan1 + (daysBeforeMonth[Int(month - 1)] + day - 1) * 86_400_000
  }

  private static func series(_ response: Substatus_V1_GetChartResponse) -> [String] {
    response.series.map { "\($0.name) \($0.currency): \($0.values.map { String($0) }.joined(separator: " "))" }
  }

  @Test("MRR movement and revenue with proceeds by month; the app's Small Business Program setting changes proceeds")
  func importedHistories() async throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("charts-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let store = try SQLiteStore(configuration: .dataDirectory(directory.path, keyring: nil))
    try await withService(store: store) { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let d = Self.d
      let histories: [String: [Substatus_V1_Transaction]] = [
        // A week's free trial on Jan 1, converted on Jan 8, renewed Feb 8 and Mar 8.
        "a": [
          Self.transaction("a1", original: "a1", "premium.monthly", from: d(1, 1), to: d(1, 8), price: 0, currency: "USD", trial: true),
          Self.transaction("a2", original: "a1", "premium.monthly", from: d(1, 8), to: d(2, 8), price: 9990, currency: "USD"),
          Self.transaction("a3", original: "a1", "premium.monthly", from: d(2, 8), to: d(3, 8), price: 9990, currency: "USD"),
          Self.transaction("a4", original: "a1", "premium.monthly", from: d(3, 8), to: d(4, 8), price: 9990, currency: "USD"),
        ],
        // A year in euros from Feb 10: 99990 / 12 = 8332.5, rounded half up.
        "b": [Self.transaction("b1", original: "b1", "premium.yearly", from: d(2, 10), to: d(2, 10) + 366 * day, price: 99990, currency: "EUR")],
        // One month from Jan 15, never renewed: expired on Feb 15.
        "c": [Self.transaction("c1", original: "c1", "premium.monthly", from: d(1, 15), to: d(2, 15), price: 9990, currency: "USD")],
      ]
      for (user, transactions) in histories.sorted(by: { $0.key < $1.key }) {
        var request = Substatus_V1_ImportTransactionsRequest()
        request.appID = app
        request.userID = user
        request.transactions = transactions
        _ = try await h.call(Substatus_V1_IngestService.importTransactions, request, key: admin)
      }
      var request = Substatus_V1_GetChartRequest()
      request.appID = app
      request.chart = .mrrMovement
      request.fromMs = d(1, 1)
      request.toMs = d(4, 1)
      request.interval = .month
      let movement = try await h.call(Substatus_V1_ReportService.getChart, request, key: admin)
      #expect(movement.chart == .mrrMovement && movement.interval == .month && movement.environment == .production)
      #expect(movement.buckets.map(\.startMs) == [d(1, 1), d(2, 1), d(3, 1)])
      #expect(movement.currencies == ["EUR", "USD"])
      #expect(movement.series.allSatisfy { $0.unit == .milliunits })
      #expect(
        Self.series(movement) == [
          "new EUR: 0 8333 0", "expansion EUR: 0 0 0", "contraction EUR: 0 0 0", "churn EUR: 0 0 0",
          "reactivation EUR: 0 0 0", "net EUR: 0 8333 0",
          // a converts and c starts in January; c expires in February.
          "new USD: 19980 0 0", "expansion USD: 0 0 0", "contraction USD: 0 0 0", "churn USD: 0 -9990 0",
          "reactivation USD: 0 0 0", "net USD: 19980 -9990 0",
        ])

      // Revenue: a2 and c1 in January, a3 and b1 in February, a4 in March, 30 % commission.
      request.chart = .revenue
      let revenue = try await h.call(Substatus_V1_ReportService.getChart, request, key: admin)
      #expect(
        Self.series(revenue) == [
          "revenue EUR: 0 99990 0", "refunds EUR: 0 0 0", "net_revenue EUR: 0 99990 0", "proceeds EUR: 0 69993 0",
          "revenue USD: 19980 9990 9990", "refunds USD: 0 0 0", "net_revenue USD: 19980 9990 9990",
          "proceeds USD: 13986 6993 6993",
        ])

      // In the Small Business Program: 15 % (9990 * 0.85 = 8491.5, rounded half up).
      var update = Substatus_V1_UpdateAppRequest()
      update.appID = app
      var values = Substatus_V1_App()
      values.smallBusinessProgram = true
      update.app = values
      update.updateMask = ["small_business_program"]
      let updated = try await h.call(Substatus_V1_AdminService.updateApp, update, key: admin)
      #expect(updated.app?.smallBusinessProgram == true)
      var get = Substatus_V1_GetAppRequest()
      get.appID = app
      #expect(try await h.call(Substatus_V1_AdminService.getApp, get, key: admin).app?.smallBusinessProgram == true)
      let member = try await h.call(Substatus_V1_ReportService.getChart, request, key: admin)
      #expect(
        Self.series(member).filter { $0.hasPrefix("proceeds") } == [
          "proceeds EUR: 0 84992 0", "proceeds USD: 16984 8492 8492",
        ])

      // Filters: the yearly product alone.
      var filters = Substatus_V1_ChartFilters()
      filters.productIDs = ["premium.yearly"]
      request.filters = filters
      let yearly = try await h.call(Substatus_V1_ReportService.getChart, request, key: admin)
      #expect(yearly.currencies == ["EUR"])
      #expect(Self.series(yearly).first == "revenue EUR: 0 99990 0")
    }
  }
}
