import Testing

@testable import SubscriptionDomain

/// Events tell whose subscription it is (Apple's `inAppOwnershipType`), those without a
/// transaction of their own (a lapse by time alone) included: trends count no sale for a family
/// member's access (``TrendAggregator``).
@Suite("Events: ownership")
struct EventOwnershipTests {
  static let day: Int64 = 86_400_000

  @Test(
    "a subscription's events carry its ownership, the expiry by time alone included",
    arguments: [OwnershipType.familyShared, .purchased, nil])
  func ownership(_ ownership: OwnershipType?) {
    let start = utc(2024, 1, 1)
    var model = EventLogModel()
    let started = model.write(
      [
        Transaction(
          transactionId: "1", productId: "family.monthly", purchaseDate: start, expiresDate: start + 30 * Self.day,
          inAppOwnershipType: ownership, environment: .production, price: 4990, currency: "USD")
      ], at: start)
    // No renewal: the period ends, and the scheduler's run finds the lapse (no transaction causes it).
    let lapsed = model.tick(at: start + 31 * Self.day)
    #expect(started.map(\.type) == [.subscriptionStarted])
    #expect(lapsed.map(\.type) == [.expired])
    #expect(lapsed.first?.transactionId == nil)
    // Apple: an absent inAppOwnershipType is a purchase.
    #expect((started + lapsed).map(\.ownershipType) == Array(repeating: ownership ?? .purchased, count: 2))
  }
}
