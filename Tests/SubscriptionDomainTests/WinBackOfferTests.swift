import Foundation
import Testing

@testable import SubscriptionDomain

/// One row of the win-back table: a history, renewal infos, a product, and the answer for each of
/// its catalog win-back offers (`premium.monthly` has `premium.wb.half` then `premium.wb.free`;
/// `pro.monthly` has `pro.wb`).
struct WinBackCase: Sendable, CustomTestStringConvertible {
  var name: String
  var history: [Transaction] = []
  var renewals: [RenewalInfo] = []
  var time: Int64 = utc(2024, 6, 1)
  var product = "premium.monthly"
  /// (offer id, eligible, reason, evidence) per catalog offer, in catalog order.
  var offers: [(String, Bool, EligibilityReason, String?)]
  var testDescription: String { name }
}

/// A renewal info that lists Apple's `eligibleWinBackOfferIds`.
private func winBack(
  _ otx: String, _ product: String, _ eligible: [String], signed: Int64? = nil
) -> RenewalInfo {
  var info = renewal(otx, product, autoRenew: false, signed: signed)
  info.eligibleWinBackOfferIds = eligible
  return info
}

private let apr1 = utc(2024, 4, 1)
private let half = "premium.wb.half"
private let free = "premium.wb.free"

let winBackCases: [WinBackCase] = [
  WinBackCase(
    name: "no renewal info in the group: no offer, no evidence",
    history: [tx("p1", "premium.monthly", jan1, feb1)],
    offers: [(half, false, .winBackNotOffered, nil), (free, false, .winBackNotOffered, nil)]),
  WinBackCase(
    name: "Apple lists one offer: only it is offered, answers in catalog order, not Apple's",
    history: [tx("p1", "premium.monthly", jan1, feb1)],
    renewals: [winBack("p1", "premium.monthly", [free, "premium.wb.unknown"], signed: feb1)],
    offers: [(half, false, .winBackNotOffered, "p1"), (free, true, .winBackOffered, "p1")]),
  WinBackCase(
    name: "Apple lists both offers",
    history: [tx("p1", "premium.monthly", jan1, feb1)],
    renewals: [winBack("p1", "premium.monthly", [half, free], signed: feb1)],
    offers: [(half, true, .winBackOffered, "p1"), (free, true, .winBackOffered, "p1")]),
  WinBackCase(
    name: "Apple lists offers of other products only: none offered",
    history: [tx("p1", "premium.monthly", jan1, feb1)],
    renewals: [winBack("p1", "premium.monthly", ["pro.wb"], signed: feb1)],
    offers: [(half, false, .winBackNotOffered, "p1"), (free, false, .winBackNotOffered, "p1")]),
  WinBackCase(
    name: "an empty list from Apple (an active subscriber): none offered, with evidence",
    history: [tx("p1", "premium.monthly", utc(2024, 5, 15), utc(2024, 6, 15))],
    renewals: [winBack("p1", "premium.monthly", [], signed: utc(2024, 5, 15))],
    offers: [(half, false, .winBackNotOffered, "p1"), (free, false, .winBackNotOffered, "p1")]),
  WinBackCase(
    name: "the renewal info of another product of the group decides",
    history: [tx("y1", "premium.yearly", jan1, feb1)],
    renewals: [winBack("y1", "premium.yearly", [half], signed: feb1)],
    offers: [(half, true, .winBackOffered, "y1"), (free, false, .winBackNotOffered, "y1")]),
  WinBackCase(
    name: "latest signedDate wins: a newer renewal info of another subscription says no",
    history: [tx("p1", "premium.monthly", jan1, feb1), tx("q1", "premium.yearly", jan1, feb1)],
    renewals: [
      winBack("p1", "premium.monthly", [half], signed: mar1),
      winBack("q1", "premium.yearly", [], signed: apr1),
    ],
    offers: [(half, false, .winBackNotOffered, "q1"), (free, false, .winBackNotOffered, "q1")]),
  WinBackCase(
    name: "latest signedDate wins even when its subscription is the older one",
    history: [tx("p1", "premium.monthly", jan1, feb1), tx("q1", "premium.yearly", feb1, mar1)],
    renewals: [
      winBack("p1", "premium.monthly", [half], signed: apr1),
      winBack("q1", "premium.yearly", [free], signed: mar1),
    ],
    offers: [(half, true, .winBackOffered, "p1"), (free, false, .winBackNotOffered, "p1")]),
  WinBackCase(
    name: "a signed renewal info beats one without signedDate (a receipt's)",
    history: [tx("p1", "premium.monthly", feb1, mar1), tx("q1", "premium.yearly", jan1, feb1)],
    renewals: [
      winBack("p1", "premium.monthly", [], signed: nil),
      winBack("q1", "premium.yearly", [half], signed: feb1),
    ],
    offers: [(half, true, .winBackOffered, "q1"), (free, false, .winBackNotOffered, "q1")]),
  WinBackCase(
    name: "same signedDate: the subscription with the latest transaction decides",
    history: [
      tx("p1", "premium.monthly", jan1, feb1),
      tx("q1", "premium.yearly", jan1, feb1), tx("q2", "premium.yearly", feb1, mar1, otx: "q1"),
    ],
    renewals: [
      winBack("p1", "premium.monthly", [half, free], signed: apr1),
      winBack("q1", "premium.yearly", [free], signed: apr1),
    ],
    offers: [(half, false, .winBackNotOffered, "q1"), (free, true, .winBackOffered, "q1")]),
  WinBackCase(
    name: "same signedDate: a subscription with transactions beats one without",
    history: [tx("p1", "premium.monthly", jan1, feb1)],
    renewals: [
      winBack("p1", "premium.monthly", [half], signed: apr1),
      winBack("a1", "premium.yearly", [free], signed: apr1),
    ],
    offers: [(half, true, .winBackOffered, "p1"), (free, false, .winBackNotOffered, "p1")]),
  WinBackCase(
    name: "same signedDate, no transactions: the smaller original transaction id decides",
    renewals: [
      winBack("b1", "premium.yearly", [half], signed: apr1),
      winBack("a1", "premium.monthly", [free], signed: apr1),
    ],
    offers: [(half, false, .winBackNotOffered, "a1"), (free, true, .winBackOffered, "a1")]),
  WinBackCase(
    name: "a renewal info without transactions is placed by its product",
    renewals: [winBack("x1", "premium.yearly", [free], signed: feb1)],
    offers: [(half, false, .winBackNotOffered, "x1"), (free, true, .winBackOffered, "x1")]),
  WinBackCase(
    name: "another group's renewal info does not count",
    history: [tx("r1", "pro.monthly", jan1, feb1)],
    renewals: [winBack("r1", "pro.monthly", [half, "pro.wb"], signed: feb1)],
    offers: [(half, false, .winBackNotOffered, nil), (free, false, .winBackNotOffered, nil)]),
  WinBackCase(
    name: "the other group's product gets its own answer",
    history: [tx("r1", "pro.monthly", jan1, feb1)],
    renewals: [winBack("r1", "pro.monthly", ["pro.wb"], signed: feb1)],
    product: "pro.monthly",
    offers: [("pro.wb", true, .winBackOffered, "r1")]),
  WinBackCase(
    name: "as_of: the stored renewal info answers long after it was signed",
    history: [tx("p1", "premium.monthly", jan1, feb1)],
    renewals: [winBack("p1", "premium.monthly", [half], signed: feb1)],
    time: utc(2026, 1, 1),
    offers: [(half, true, .winBackOffered, "p1"), (free, false, .winBackNotOffered, "p1")]),
  WinBackCase(
    name: "as_of before the subscription began: its renewal info does not count yet",
    history: [tx("p1", "premium.monthly", mar1, apr1)],
    renewals: [winBack("p1", "premium.monthly", [half], signed: apr1)],
    time: feb1,
    offers: [(half, false, .winBackNotOffered, nil), (free, false, .winBackNotOffered, nil)]),
  WinBackCase(
    name: "an auto-renewable without win-back offers in the catalog: none",
    history: [tx("p1", "premium.monthly", jan1, feb1)],
    renewals: [winBack("p1", "premium.monthly", [half], signed: feb1)],
    product: "premium.yearly", offers: []),
  WinBackCase(
    name: "not an auto-renewable: none", product: "coins.100", offers: []),
  WinBackCase(
    name: "unknown product: none", product: "nope", offers: []),
]

@Suite("Win-back offers (rule 19)")
struct WinBackOfferTests {
  @Test("win-back table", arguments: winBackCases)
  func winBackOffers(_ c: WinBackCase) {
    // The answer does not depend on the order of the renewal infos.
    for renewals in [c.renewals, c.renewals.reversed()] {
      let answer = evaluate(c.history, renewals, at: c.time).eligibility(for: c.product)
      #expect(answer.winBackOffers.map(\.offerId) == c.offers.map(\.0))
      #expect(answer.winBackOffers.map(\.eligible) == c.offers.map(\.1))
      #expect(answer.winBackOffers.map(\.reason) == c.offers.map(\.2))
      #expect(answer.winBackOffers.map(\.evidenceTransactionId) == c.offers.map(\.3))
    }
  }

  @Test("intro and promotional answers are unchanged by win-back data")
  func otherOffersUnchanged() {
    let history = [tx("p1", "premium.monthly", jan1, feb1)]
    let plain = evaluate(history, [renewal("p1", "premium.monthly", autoRenew: false)], at: apr1)
      .eligibility(for: "premium.monthly")
    let offered = evaluate(history, [winBack("p1", "premium.monthly", [half])], at: apr1)
      .eligibility(for: "premium.monthly")
    #expect(plain.introductory == offered.introductory)
    #expect(plain.promotional == offered.promotional)
    #expect(offered.winBackOffers.map(\.eligible) == [true, false])
  }

  @Test("every win-back reason is produced by some row of the table")
  func everyReasonCovered() {
    let seen = Set(
      winBackCases.flatMap { c in
        evaluate(c.history, c.renewals, at: c.time).eligibility(for: c.product).winBackOffers
          .map(\.reason)
      })
    #expect(seen == [.winBackOffered, .winBackNotOffered])
  }

  @Test("the catalog keeps win-back offer ids; products stored without them decode to none")
  func catalogCoding() throws {
    #expect(Fixture.catalog["premium.monthly"]?.winBackOfferIds == [half, free])
    #expect(Fixture.catalog["premium.yearly"]?.winBackOfferIds == [])
    let old = #"{"productId":"a","type":"AUTO_RENEWABLE","hasIntroductoryOffer":false,"promotionalOfferIds":[]}"#
    let product = try JSONDecoder().decode(Product.self, from: Data(old.utf8))
    #expect(product.winBackOfferIds == [])
    var changed = product
    changed.winBackOfferIds = ["wb"]
    #expect(try JSONDecoder().decode(Product.self, from: JSONEncoder().encode(changed)) == changed)
  }
}
