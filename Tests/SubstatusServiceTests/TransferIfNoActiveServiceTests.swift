import Foundation
import SubscriptionDomain
import SubscriptionStorage
import SubstatusWire
import Testing

@testable import SubstatusService

/// Purchase sharing TRANSFER_IF_NO_ACTIVE and the sandbox override through the service
/// (docs/architecture.md "Access model"): SetPolicy, restores by a second account while the first
/// is entitled and after, and answers with `as_of_ms` at each decision.
@Suite struct TransferIfNoActiveServiceTests {
  typealias Sharing = PurchaseSharingServiceTests
  static let (t0, day) = (Sharing.t0, Sharing.day)

  /// A receipt body of `environment` with the shared subscription (active until t0 + 20 days).
  static func body(_ environment: String) -> [UInt8] {
    Array(
      #"{"status":0,"environment":"\#(environment)","latest_receipt_info":[\#(Sharing.subscription.joined(separator: ","))]}"#
        .utf8)
  }

  static func restore(_ h: Harness, _ app: String, _ user: String, key: String, environment: String = "Sandbox")
    async throws -> Substatus_V1_ImportReceiptResponseResponse
  {
    var request = Substatus_V1_ImportReceiptResponseRequest()
    request.appID = app
    request.userID = user
    request.verifyReceiptResponseJson = body(environment)
    return try await h.call(Substatus_V1_IngestService.importReceiptResponse, request, key: key)
  }

  @Test("TRANSFER_IF_NO_ACTIVE: refused while the first account is entitled, transferred once it is not; as_of_ms exact")
  func transferIfNoActive() async throws {
    try await withService { h in
      let (admin, app) = try await Sharing.app(h, .transferIfNoActive)
      _ = try await Self.restore(h, app, "u1", key: admin)
      h.world.now.withLock { $0 += 3_600_000 }
      // u1's subscription covers now: u2 is refused it, as under KEEP_FIRST.
      let refused = try await Self.restore(h, app, "u2", key: admin)
      #expect(refused.refusedOriginalTransactions.map(\.originalTransactionID) == ["s1"])
      #expect(refused.refusedOriginalTransactions.first?.error?.reason == "OWNED_BY_ANOTHER_USER")
      #expect(Sharing.premium(try await h.statusResponse(app, "u1", key: admin)) == .active)
      #expect(Sharing.premium(try await h.statusResponse(app, "u2", key: admin)) == .neverSubscribed)

      // 21 days on it has expired: the next restore takes it.
      h.world.now.withLock { $0 += 21 * Self.day }
      let movedAt = h.world.clock.wallMs
      let moved = try await Self.restore(h, app, "u2", key: admin)
      #expect(moved.refusedOriginalTransactions.isEmpty)
      #expect(
        try await h.service.store.ownershipTransfers(appId: app, environment: .sandbox, originalTransactionId: "s1") == [
          OwnershipTransfer(
            appId: app, environment: .sandbox, originalTransactionId: "s1", previousUserId: "u1", newUserId: "u2",
            atMs: movedAt)
        ])
      #expect(Sharing.premium(try await h.statusResponse(app, "u2", key: admin)) == .expired)
      #expect(Sharing.premium(try await h.statusResponse(app, "u1", key: admin)) == .neverSubscribed)
      // Before the transfer u1 had it (active at t0), u2 never did.
      #expect(Sharing.premium(try await h.statusResponse(app, "u1", key: admin, asOf: Self.t0)) == .active)
      #expect(Sharing.premium(try await h.statusResponse(app, "u2", key: admin, asOf: Self.t0)) == .neverSubscribed)
      #expect(Sharing.premium(try await h.statusResponse(app, "u1", key: admin, asOf: movedAt - 1)) == .expired)
    }
  }

  @Test("purchase_sharing_sandbox: production transfers while the sandbox shares; UNSPECIFIED follows production")
  func sandboxOverride() async throws {
    try await withService { h in
      let (admin, app) = try await Sharing.app(h, .transfer)
      var set = Substatus_V1_SetPolicyRequest()
      set.appID = app
      set.policy = Substatus_V1_EligibilityPolicy()
      set.policy?.purchaseSharingSandbox = .share
      set.updateMask = ["purchase_sharing_sandbox"]
      let updated = try await h.call(Substatus_V1_AdminService.setPolicy, set, key: admin)
      #expect(updated.app?.policy?.purchaseSharing == .transfer)
      #expect(updated.app?.policy?.purchaseSharingSandbox == .share)

      for environment in ["Production", "Sandbox"] {
        _ = try await Self.restore(h, app, "u1", key: admin, environment: environment)
        h.world.now.withLock { $0 += 3_600_000 }
        _ = try await Self.restore(h, app, "u2", key: admin, environment: environment)
      }
      #expect(try await h.service.store.users(appId: app, environment: .production, originalTransactionId: "s1") == ["u2"])
      #expect(try await h.service.store.users(appId: app, environment: .sandbox, originalTransactionId: "s1") == ["u1", "u2"])
      // Sandbox answers: both accounts have it.
      for user in ["u1", "u2"] {
        #expect(Sharing.premium(try await h.statusResponse(app, user, key: admin)) == .active)
      }

      // Cleared (UNSPECIFIED), the sandbox transfers like production.
      set.policy?.purchaseSharingSandbox = .unspecified
      #expect(try await h.call(Substatus_V1_AdminService.setPolicy, set, key: admin).app?.policy?.purchaseSharingSandbox == .unspecified)
      h.world.now.withLock { $0 += 3_600_000 }
      _ = try await Self.restore(h, app, "u3", key: admin)
      #expect(try await h.service.store.users(appId: app, environment: .sandbox, originalTransactionId: "s1") == ["u3"])
      #expect(Sharing.premium(try await h.statusResponse(app, "u1", key: admin)) == .neverSubscribed)
    }
  }
}
