import Foundation
import Testing
import RPCCore
import SubstatusWire
import SubscriptionDomain
import SubscriptionStorage
import SubscriptionStorageSQLite
import SubscriptionStorageTesting
@testable import SubstatusService

/// 2024-01-01T00:00:00Z in milliseconds, and a day.
private let jan1: Int64 = 1_704_067_200_000
private let day: Int64 = 86_400_000

@Suite("ReportService.GetTrends: requests")
struct TrendsRequestTests {
  private func trends(
    _ h: Harness, _ admin: String, _ app: String, _ build: (inout Substatus_V1_GetTrendsRequest) -> Void
  ) async throws -> Substatus_V1_GetTrendsResponse {
    var request = Substatus_V1_GetTrendsRequest()
    request.appID = app
    request.fromMs = jan1
    request.toMs = jan1 + 7 * day
    build(&request)
    return try await h.call(Substatus_V1_ReportService.getTrends, request, key: admin)
  }

  @Test(
    "a bad range is INVALID_ARGUMENT naming the field",
    arguments: [
      (jan1 + 1, jan1 + day, Substatus_V1_TrendInterval.day, "from_ms"),
      (jan1, jan1 + day + 1000, .day, "to_ms"),
      (jan1, jan1, .day, "to_ms"),
      (jan1 + day, jan1, .week, "to_ms"),
      (jan1, jan1 + 1001 * day, .day, "interval"),
      (jan1, jan1 + day, .UNRECOGNIZED(9), "interval"),
    ])
  func invalid(from: Int64, to: Int64, interval: Substatus_V1_TrendInterval, field: String) async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let error = await #expect(throws: RPCError.self) {
        try await trends(h, admin, app) {
          $0.fromMs = from
          $0.toMs = to
          $0.interval = interval
        }
      }
      #expect(error?.code == .invalidArgument)
      #expect(try violatedField(error) == field)
    }
  }

  @Test("an unknown environment is INVALID_ARGUMENT; another tenant's app is NOT_FOUND")
  func environmentAndApp() async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let (otherAdmin, _) = try await h.makeTenantWithApp(name: "other", bundleID: "com.other.app")
      let badEnvironment = await #expect(throws: RPCError.self) {
        try await trends(h, admin, app) { $0.environment = .UNRECOGNIZED(7) }
      }
      #expect(try violatedField(badEnvironment) == "environment")
      let otherTenant = await #expect(throws: RPCError.self) { try await trends(h, otherAdmin, app) { _ in } }
      #expect(otherTenant?.code == .notFound)
    }
  }
}

@Suite("ReportService.GetTrends: counted from the event log of a real store")
struct TrendsStoreTests {
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

  private static func utcMidnight(_ month: Int64, _ day: Int64) -> Int64 {
    let daysBeforeMonth: [Int64] = [0, 31, 60, 91, 121]  // 2024, a leap year
    return jan1 + (daysBeforeMonth[Int(month - 1)] + day - 1) * 86_400_000
  }

  @Test("imported histories: trials, conversions, renewals, churn, revenue and MRR by month, in a SQLite file")
  func importedHistories() async throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("trends-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let store = try SQLiteStore(configuration: .dataDirectory(directory.path, keyring: nil))
    try await withService(store: store) { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let d = Self.utcMidnight
      let histories: [String: [Substatus_V1_Transaction]] = [
        // A week's free trial on Jan 1, converted on Jan 8, renewed Feb 8 and Mar 8.
        "a": [
          Self.transaction("a1", original: "a1", "premium.monthly", from: d(1, 1), to: d(1, 8), price: 0, currency: "USD", trial: true),
          Self.transaction("a2", original: "a1", "premium.monthly", from: d(1, 8), to: d(2, 8), price: 9990, currency: "USD"),
          Self.transaction("a3", original: "a1", "premium.monthly", from: d(2, 8), to: d(3, 8), price: 9990, currency: "USD"),
          Self.transaction("a4", original: "a1", "premium.monthly", from: d(3, 8), to: d(4, 8), price: 9990, currency: "USD"),
        ],
        // A year in euros from Feb 10.
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
      var request = Substatus_V1_GetTrendsRequest()
      request.appID = app
      request.fromMs = d(1, 1)
      request.toMs = d(4, 1)
      request.interval = .month
      let trends = try await h.call(Substatus_V1_ReportService.getTrends, request, key: admin)
      let b = trends.buckets
      #expect(trends.interval == .month && trends.environment == .production)
      #expect(b.map(\.startMs) == [d(1, 1), d(2, 1), d(3, 1)])
      #expect(b.map(\.trialsStarted) == [1, 0, 0])
      #expect(b.map(\.trialsConverted) == [1, 0, 0])
      #expect(b.map(\.newPaidSubscriptions) == [1, 1, 0])
      #expect(b.map(\.renewals) == [0, 1, 1])
      #expect(b.map(\.churned) == [0, 1, 0])
      #expect(b.map(\.activeSubscribers) == [2, 2, 2])
      func amounts(_ list: [Substatus_V1_CurrencyAmount]) -> [String] { list.map { "\($0.currency) \($0.amountMilliunits)" } }
      #expect(b.map { amounts($0.revenue) } == [["USD 19980"], ["EUR 99990", "USD 9990"], ["USD 9990"]])
      #expect(b.map { amounts($0.mrr) } == [["USD 19980"], ["EUR 8333", "USD 9990"], ["EUR 8333", "USD 9990"]])
      #expect(trends.currencies == ["EUR", "USD"])
      // The sandbox has no events.
      request.environment = .sandbox
      let sandbox = try await h.call(Substatus_V1_ReportService.getTrends, request, key: admin)
      #expect(sandbox.buckets.allSatisfy { $0.activeSubscribers == 0 && $0.revenue.isEmpty })
    }
  }

  @Test("a log of several pages (2,500 subscriptions started and expired: 5,000 events) is read whole")
  func severalPages() async throws {
    let store = InMemoryStore()
    try await withService(store: store) { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let d = Self.utcMidnight
      let users = 2_500
      let batch = (0..<users).map { n in
        UserPurchases(
          user: UserKey(appId: app, environment: .production, userId: "u\(n)"),
          transactions: [
            Transaction(
              transactionId: "t\(n)", productId: "premium.monthly", subscriptionGroupIdentifier: "20001001",
              purchaseDate: d(1, 1) + Int64(n), expiresDate: d(2, 1), type: .autoRenewable, price: 1000,
              currency: "USD")
          ])
      }
      let summary = try await store.ingest(batch, atMs: d(3, 1))
      #expect(summary.eventsAppended == 2 * users)
      var request = Substatus_V1_GetTrendsRequest()
      request.appID = app
      request.fromMs = d(1, 1)
      request.toMs = d(3, 1)
      request.interval = .month
      let b = try await h.call(Substatus_V1_ReportService.getTrends, request, key: admin).buckets
      #expect(b.map(\.newPaidSubscriptions) == [2_500, 0])
      #expect(b.map(\.churned) == [0, 2_500])
      #expect(b.map(\.activeSubscribers) == [2_500, 0])
      #expect(b.map { $0.revenue.map(\.amountMilliunits) } == [[2_500_000], []])
      #expect(b.map { $0.mrr.map(\.amountMilliunits) } == [[2_500_000], []])
    }
  }
}
