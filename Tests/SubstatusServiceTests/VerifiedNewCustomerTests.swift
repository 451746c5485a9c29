import Foundation
import SubscriptionDomain
import SubscriptionStorage
import SubstatusWire
import Testing

@testable import SubstatusService

/// Rule 24's NEW_CUSTOMER_VERIFIED (docs/architecture.md) where purchase sharing and offer signing
/// meet it: an account that bought in a group is never a verified new customer there, even after a
/// TRANSFER moved its purchase to another app user; and the offer-signing RPCs give the reason
/// CheckEligibility gives.
@Suite struct VerifiedNewCustomerTests {
  typealias Sharing = PurchaseSharingServiceTests

  /// Marks `user`'s Apple Account (sandbox) as one whose whole history Apple answered.
  static func verify(_ h: Harness, _ app: String, _ user: String) async throws {
    let accounts: any AppAccountStore = h.service.store
    let now = h.world.now.withLock { $0 }
    try await accounts.saveAppAccount(
      AppAccountLink(
        user: UserKey(appId: app, environment: .sandbox, userId: user), appTransactionId: "at-\(user)",
        linkedMs: now, historyVerifiedMs: now))
  }

  @Test("after a TRANSFER, the account that lost the purchase is NEW_CUSTOMER, not NEW_CUSTOMER_VERIFIED, in its group")
  func transferredAwayIsNotVerifiedNew() async throws {
    try await withService { h in
      let (admin, app) = try await Sharing.app(h, .transfer)
      try await Sharing.restore(h, app, "u1", key: admin)
      h.world.now.withLock { $0 += 3_600_000 }
      let restoredAt = h.world.clock.wallMs
      try await Sharing.restore(h, app, "u2", key: admin)
      for user in ["u1", "u2", "u3"] { try await Self.verify(h, app, user) }
      // u1 holds the purchase it lost: its Apple Account did buy in the group.
      #expect(try await h.eligibility(app, "u1", "premium.monthly", key: admin).introductory?.reason == .newCustomer)
      // u3's verified account never bought: Apple's word.
      #expect(try await h.eligibility(app, "u3", "premium.monthly", key: admin).introductory?.reason == .newCustomerVerified)
      // Before the transfer u2 did not own it, but its account had bought it: not verified new either.
      var query = Substatus_V1_EligibilityQuery()
      query.userID = "u2"
      query.productIDs = ["premium.monthly"]
      var check = Substatus_V1_CheckEligibilityRequest()
      check.appID = app
      check.queries = [query]
      check.environment = .sandbox
      check.asOfMs = restoredAt - 1
      let before = try await h.call(Substatus_V1_EligibilityService.checkEligibility, check, key: admin)
      #expect(before.users.first?.products.first?.introductory?.reason == .newCustomer)
    }
  }

  @Test("SignIntroductoryOfferEligibility says NEW_CUSTOMER_VERIFIED where CheckEligibility does")
  func signingAgreesWithCheckEligibility() async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      try await h.setInAppPurchaseKey(app, key: admin)
      try await Self.verify(h, app, "fresh")
      #expect(try await h.eligibility(app, "fresh", "premium.monthly", key: admin).introductory?.reason == .newCustomerVerified)
      var request = Substatus_V1_SignIntroductoryOfferEligibilityRequest()
      request.appID = app
      request.userID = "fresh"
      request.productID = "premium.monthly"
      request.transactionID = "704289572311575926"
      request.environment = .sandbox
      let signed = try await h.call(Substatus_V1_EligibilityService.signIntroductoryOfferEligibility, request, key: admin)
      #expect(signed.reason == .newCustomerVerified)
      // Unverified, both say NEW_CUSTOMER.
      request.userID = "unlinked"
      #expect(try await h.call(Substatus_V1_EligibilityService.signIntroductoryOfferEligibility, request, key: admin).reason == .newCustomer)
      #expect(try await h.eligibility(app, "unlinked", "premium.monthly", key: admin).introductory?.reason == .newCustomer)
    }
  }
}
