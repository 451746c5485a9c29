import SubscriptionDomain
import SubscriptionStorage
import Testing

/// Purchase sharing (docs/architecture.md "Access model"): two users submit the same original
/// transaction, as when a customer restores purchases under a second account of the app.
enum SharingFixture {
  /// The shared subscription (two renewals and a renewal info) and one of the user's own.
  static let shared = "otx-shared"

  /// A submission of the shared subscription (and `own`, a subscription only this user has).
  static func restore(_ userId: String, at ms: Int64?, own: String? = nil) -> UserPurchases {
    var transactions = [
      Fixture.transaction(shared, purchase: 100, expires: 200),
      Fixture.transaction("\(shared)-2", original: shared, purchase: 200, expires: 300),
    ]
    var renewals = [Fixture.renewal(shared, signed: 250)]
    if let own {
      transactions.append(Fixture.transaction(own, purchase: 150, expires: 250))
      renewals.append(Fixture.renewal(own, signed: 250))
    }
    return UserPurchases(
      user: Fixture.user(userId), transactions: transactions, renewalInfos: renewals, submittedMs: ms)
  }

  static func gap(from: Int64? = nil, until: Int64? = nil) -> OwnershipGap {
    OwnershipGap(originalTransactionId: shared, fromMs: from, untilMs: until)
  }

  static func transfer(_ previous: String, _ new: String, at ms: Int64) -> OwnershipTransfer {
    OwnershipTransfer(
      appId: "a1", environment: .production, originalTransactionId: shared, previousUserId: previous,
      newUserId: new, atMs: ms)
  }

  /// The store with app a1 under `sharing`.
  static func seed(_ store: any Store, _ sharing: PurchaseSharing) async throws {
    try await Fixture.seed(store)
    _ = try await store.setPolicy(appId: "a1", policy: EligibilityPolicy(purchaseSharing: sharing))
  }
}

extension Store {
  fileprivate func owners() async throws -> [String] {
    try await users(appId: "a1", environment: .production, originalTransactionId: SharingFixture.shared)
  }

  fileprivate func gaps(_ ids: String...) async throws -> [String: [OwnershipGap]] {
    try await ownershipGaps(appId: "a1", environment: .production, userIds: ids)
  }

  fileprivate func transfers() async throws -> [OwnershipTransfer] {
    try await ownershipTransfers(appId: "a1", environment: .production, originalTransactionId: SharingFixture.shared)
  }

  fileprivate func originals(of userId: String) async throws -> Set<String> {
    let h = try await history(of: Fixture.user(userId))
    return Set(h.transactions.map(\.originalTransactionId)).union(h.renewalInfos.map(\.originalTransactionId))
  }
}

extension StoreContract {
  /// The two orders in which two users restore the same purchase.
  static let restoreOrders = [("u1", "u2"), ("u2", "u1")]

  /// purchase sharing SHARE: every submitter has it, no ownership rows, the app is not tracked
  static func purchaseSharingShare(_ store: any Store) async throws {
    try await Fixture.seed(store)
    #expect(try await store.app(id: "a1").ownershipTracked == false)
    for (n, (first, second)) in restoreOrders.enumerated() {
      let shift = Int64(n) * 1_000
      let a = try await store.ingest([SharingFixture.restore(first, at: 1_000 + shift)], atMs: Fixture.now)
      let b = try await store.ingest([SharingFixture.restore(second, at: 2_000 + shift)], atMs: Fixture.now)
      #expect(a.refused.isEmpty && b.refused.isEmpty && a.transfers.isEmpty && b.transfers.isEmpty)
    }
    #expect(try await store.owners() == ["u1", "u2"])
    #expect(try await store.originals(of: "u1") == [SharingFixture.shared])
    #expect(try await store.originals(of: "u2") == [SharingFixture.shared])
    #expect(try await store.gaps("u1", "u2").isEmpty)
    #expect(try await store.transfers().isEmpty)
    #expect(try await store.app(id: "a1").ownershipTracked == false)
  }

  /// purchase sharing TRANSFER: the latest submitter has it from its instant; the history of owners is kept
  static func purchaseSharingTransfer(_ store: any Store) async throws {
    try await SharingFixture.seed(store, .transfer)
    #expect(try await store.app(id: "a1").ownershipTracked)
    for (first, second) in restoreOrders {
      _ = try await store.deleteUsers(appId: "a1", userIds: ["u1", "u2", "u3"])
      let a = try await store.ingest([SharingFixture.restore(first, at: 1_000)], atMs: Fixture.now)
      #expect(a.transfers.isEmpty && a.refused.isEmpty)
      #expect(try await store.owners() == [first])
      // The second restores at 2000: the first loses it then, the second did not own it before.
      let b = try await store.ingest([SharingFixture.restore(second, at: 2_000, own: "otx-own-\(second)")], atMs: Fixture.now)
      #expect(b.refused.isEmpty)
      #expect(b.transfers == [SharingFixture.transfer(first, second, at: 2_000)])
      #expect(try await store.transfers() == [SharingFixture.transfer(first, second, at: 2_000)])
      #expect(try await store.owners() == [second])
      #expect(try await store.gaps(first, second) == [
        first: [SharingFixture.gap(from: 2_000)], second: [SharingFixture.gap(until: 2_000)],
      ])
      // Both keep the data: the history is whole, the gaps say who owned it when.
      #expect(try await store.originals(of: first) == [SharingFixture.shared])
      #expect(try await store.originals(of: second) == [SharingFixture.shared, "otx-own-\(second)"])
      // Submitting again what one owns changes nothing.
      #expect(try await store.ingest([SharingFixture.restore(second, at: 2_500)], atMs: Fixture.now).transfers.isEmpty)
      // A write that is not a submission (a notification, a refresh) moves nothing: stored for
      // the holders, refused to a user who does not hold it while another owns it.
      let refresh = try await store.ingest([
        SharingFixture.restore(first, at: nil), SharingFixture.restore("u3", at: nil, own: "otx-own-u3"),
      ], atMs: Fixture.now)
      #expect(refresh.transfers.isEmpty)
      #expect(refresh.refused == [OwnershipRefusal(user: Fixture.user("u3"), originalTransactionId: SharingFixture.shared)])
      #expect(try await store.originals(of: "u3") == ["otx-own-u3"])
      #expect(try await store.owners() == [second])
      // The first restores again at 3000 and takes it back: its gap closes, the second's opens.
      let c = try await store.ingest([SharingFixture.restore(first, at: 3_000)], atMs: Fixture.now)
      #expect(c.transfers == [SharingFixture.transfer(second, first, at: 3_000)])
      #expect(try await store.owners() == [first])
      #expect(try await store.gaps(first, second) == [
        first: [SharingFixture.gap(from: 2_000, until: 3_000)],
        second: [SharingFixture.gap(until: 2_000), SharingFixture.gap(from: 3_000)],
      ])
      #expect(try await store.transfers() == [
        SharingFixture.transfer(first, second, at: 2_000), SharingFixture.transfer(second, first, at: 3_000),
      ])
    }
    // Erasure takes the users' gaps and the transfers that name them.
    _ = try await store.deleteUsers(appId: "a1", userIds: ["u1", "u2"])
    #expect(try await store.gaps("u1", "u2").isEmpty)
    #expect(try await store.transfers().isEmpty)
  }

  /// purchase sharing KEEP_FIRST: a later submitter is refused that original transaction only, and stores none of it
  static func purchaseSharingKeepFirst(_ store: any Store) async throws {
    try await SharingFixture.seed(store, .keepFirst)
    for (first, second) in restoreOrders {
      _ = try await store.deleteUsers(appId: "a1", userIds: ["u1", "u2"])
      #expect(try await store.ingest([SharingFixture.restore(first, at: 1_000)], atMs: Fixture.now).refused.isEmpty)
      let b = try await store.ingest([SharingFixture.restore(second, at: 2_000, own: "otx-own-\(second)")], atMs: Fixture.now)
      #expect(b.refused == [OwnershipRefusal(user: Fixture.user(second), originalTransactionId: SharingFixture.shared)])
      #expect(b.transfers.isEmpty)
      #expect(b.transactionsWritten == 1 && b.renewalInfosWritten == 1)
      // Nothing of the refused original transaction is stored for the second; the rest is.
      #expect(try await store.originals(of: second) == ["otx-own-\(second)"])
      #expect(try await store.owners() == [first])
      // The first submits again: still theirs. The second again: refused again.
      #expect(try await store.ingest([SharingFixture.restore(first, at: 3_000)], atMs: Fixture.now).refused.isEmpty)
      #expect(try await store.ingest([SharingFixture.restore(second, at: 3_500)], atMs: Fixture.now).refused.count == 1)
      #expect(try await store.gaps(first, second).isEmpty)
      #expect(try await store.transfers().isEmpty)
    }
    // Once the owner is erased nobody owns it: the next submitter keeps it.
    _ = try await store.deleteUsers(appId: "a1", userIds: ["u2"])
    #expect(try await store.ingest([SharingFixture.restore("u1", at: 4_000)], atMs: Fixture.now).refused.isEmpty)
    #expect(try await store.owners() == ["u1"])
    // In one batch (applied in an order of the store's choosing), one keeps it, the other is refused.
    _ = try await store.deleteUsers(appId: "a1", userIds: ["u1"])
    let batch = try await store.ingest([SharingFixture.restore("u2", at: 5_000), SharingFixture.restore("u1", at: 5_000)], atMs: Fixture.now)
    #expect(batch.refused.map(\.originalTransactionId) == [SharingFixture.shared])
    #expect(try await store.owners() == ["u1", "u2"].filter { $0 != batch.refused.first?.user.userId })
  }

  /// purchase sharing TRANSFER never moves an ASSIGNED original transaction (rule 23): the first
  /// submitter keeps it and a later one is refused it, as under KEEP_FIRST
  static func purchaseSharingAssigned(_ store: any Store) async throws {
    try await SharingFixture.seed(store, .transfer)
    func assigned(_ userId: String, at ms: Int64) -> UserPurchases {
      var update = SharingFixture.restore(userId, at: ms)
      for i in update.transactions.indices { update.transactions[i].inAppOwnershipType = .assigned }
      return update
    }
    #expect(try await store.ingest([assigned("u1", at: 1_000)], atMs: Fixture.now).refused.isEmpty)
    let b = try await store.ingest([assigned("u2", at: 2_000)], atMs: Fixture.now)
    #expect(b.refused == [OwnershipRefusal(user: Fixture.user("u2"), originalTransactionId: SharingFixture.shared)])
    #expect(b.transfers.isEmpty)
    #expect(try await store.owners() == ["u1"])
    #expect(try await store.transfers().isEmpty)
    #expect(try await store.history(of: Fixture.user("u1")).transactions.allSatisfy { $0.ownership == .assigned })
    // The same purchase bought, not assigned, transfers as before.
    _ = try await store.deleteUsers(appId: "a1", userIds: ["u1", "u2"])
    _ = try await store.ingest([SharingFixture.restore("u1", at: 3_000)], atMs: Fixture.now)
    #expect(try await store.ingest([SharingFixture.restore("u2", at: 4_000)], atMs: Fixture.now).transfers.count == 1)
  }

  /// purchase sharing: a policy change affects later submissions only, and the app stays tracked
  static func purchaseSharingPolicyChange(_ store: any Store) async throws {
    try await Fixture.seed(store)
    _ = try await store.ingest([SharingFixture.restore("u1", at: 1_000), SharingFixture.restore("u2", at: 1_500)], atMs: Fixture.now)
    var policy = EligibilityPolicy(purchaseSharing: .transfer)
    #expect(try await store.setPolicy(appId: "a1", policy: policy).ownershipTracked)
    // Changing the policy moved nothing; the next submission takes it from both sharers.
    #expect(try await store.owners() == ["u1", "u2"])
    let c = try await store.ingest([SharingFixture.restore("u3", at: 2_000)], atMs: Fixture.now)
    #expect(c.transfers == [SharingFixture.transfer("u1", "u3", at: 2_000), SharingFixture.transfer("u2", "u3", at: 2_000)])
    #expect(try await store.owners() == ["u3"])
    // Back to SHARE: the losses stay (and are still read: tracked); a new submission shares again.
    policy.purchaseSharing = .share
    #expect(try await store.setPolicy(appId: "a1", policy: policy).ownershipTracked)
    #expect(try await store.app(id: "a1").policy.purchaseSharing == .share)
    #expect(try await store.gaps("u1")["u1"] == [SharingFixture.gap(from: 2_000)])
    let d = try await store.ingest([SharingFixture.restore("u1", at: 3_000)], atMs: Fixture.now)
    #expect(d.transfers.isEmpty && d.refused.isEmpty)
    #expect(try await store.owners() == ["u1", "u3"])
    #expect(try await store.gaps("u1", "u2") == [
      "u1": [SharingFixture.gap(from: 2_000, until: 3_000)], "u2": [SharingFixture.gap(from: 2_000)],
    ])
    // KEEP_FIRST from now on: u2, who lost it, is refused; u1 and u3 own it and may submit.
    policy.purchaseSharing = .keepFirst
    _ = try await store.setPolicy(appId: "a1", policy: policy)
    #expect(try await store.ingest([SharingFixture.restore("u2", at: 4_000)], atMs: Fixture.now).refused.count == 1)
    #expect(try await store.ingest([SharingFixture.restore("u3", at: 4_000)], atMs: Fixture.now).refused.isEmpty)
  }
}

extension StoreContract {
  /// The events of `userId` (app a1) after `sequence`, in log order.
  fileprivate static func events(_ store: any Store, _ userId: String, after sequence: Int64 = 0) async throws
    -> [SubscriptionEvent]
  {
    try await store.events(appId: "a1", query: EventQuery(userId: userId), afterSequence: sequence, limit: 1000)
      .map(\.event)
  }

  /// purchase sharing events: a transfer gives both users OWNERSHIP_TRANSFERRED in its commit, with deterministic ids; events follow what each user owns
  static func purchaseSharingEvents(_ store: any Store) async throws {
    try await SharingFixture.seed(store, .transfer)
    try await store.putProducts(
      appId: "a1", products: [Product(productId: "monthly", type: .autoRenewable, subscriptionGroupId: "g1")])
    let x1 = Fixture.transaction("x1", purchase: 1_000, expires: 10_000_000, signed: 1_000)
    let x2 = Fixture.transaction("x2", original: "x1", purchase: 10_000_000, expires: 20_000_000, signed: 10_000_000)
    func restore(_ userId: String, _ transactions: [Transaction], at ms: Int64?) -> UserPurchases {
      UserPurchases(user: Fixture.user(userId), transactions: transactions, submittedMs: ms)
    }
    var runs: [[String]] = []
    for _ in 0..<2 {
      _ = try await store.deleteUsers(appId: "a1", userIds: ["u1", "u2"])
      let start = try await store.lastEventSequence()
      _ = try await store.ingest([restore("u1", [x1], at: 2_000)], atMs: 2_000)
      #expect(try await events(store, "u1", after: start).map(\.type) == [.subscriptionStarted])

      // u2 restores it at 5,000: no purchase event for u2 (it did not own it then), and each user
      // gets the change of its state at the transfer's instant.
      let moved = try await store.ingest([restore("u2", [x1], at: 5_000)], atMs: 5_000)
      #expect(moved.transfers.count == 1 && moved.eventsAppended == 2)
      let gained = try await events(store, "u2", after: start)
      #expect(gained.map(\.type) == [.ownershipTransferred])
      let lost = try await events(store, "u1", after: start).dropFirst()
      #expect(lost.map(\.type) == [.ownershipTransferred])
      for (event, before, after) in [(gained.first, SubscriptionState.neverSubscribed, SubscriptionState.active), (lost.first, .active, .neverSubscribed)] {
        #expect(event?.previousUserId == "u1" && event?.originalTransactionId == "x1")
        #expect(event?.occurredMs == 5_000 && event?.detectedMs == 5_000 && event?.subscriptionGroupId == "g1")
        #expect(event?.transactionId == "x1" && event?.productId == "monthly")
        #expect(event?.stateBefore == before && event?.stateAfter == after)
      }
      #expect(gained.first?.eventId != lost.first?.eventId)
      // Submitting what one owns again moves nothing and logs nothing.
      #expect(try await store.ingest([restore("u2", [x1], at: 6_000)], atMs: 6_000).eventsAppended == 0)

      // Time passes: changes by time alone of the purchase are u2's only.
      let timeEvents = try await store.appendDueTransitionEvents(atMs: 10_500_000, limit: 100)
      #expect(timeEvents.allSatisfy { $0.event.userId == "u2" })

      // A write that is not a submission (a refresh of u1's stored receipt) stores the renewal for
      // both holders; only the owner gets its event.
      let lastOfU1 = try await store.lastEventSequence()
      _ = try await store.ingest([restore("u1", [x1, x2], at: nil)], atMs: 11_000_000)
      #expect(try await events(store, "u1", after: lastOfU1).isEmpty)
      _ = try await store.ingest([restore("u2", [x1, x2], at: nil)], atMs: 11_000_000)
      #expect(try await events(store, "u2", after: lastOfU1).map(\.transactionId).contains("x2"))

      // u1 takes it back at 12,000,000: the renewal made while u2 owned it is not u1's event.
      let back = try await store.lastEventSequence()
      let c = try await store.ingest([restore("u1", [x1, x2], at: 12_000_000)], atMs: 12_000_000)
      #expect(c.transfers.count == 1 && c.eventsAppended == 2)
      let regained = try await events(store, "u1", after: back)
      #expect(regained.map(\.type) == [.ownershipTransferred])
      #expect(regained.first?.previousUserId == "u2" && regained.first?.transactionId == "x2")
      #expect(regained.first?.stateBefore == .neverSubscribed && regained.first?.stateAfter == .active)
      let gone = try await events(store, "u2", after: back)
      #expect(gone.map(\.type) == [.ownershipTransferred])
      #expect(gone.first?.stateBefore == .active && gone.first?.stateAfter == .neverSubscribed)
      // A refund notified after the transfer is the owner's event, even when Apple dates it a
      // little before the transfer.
      let refundFrom = try await store.lastEventSequence()
      let refund = Fixture.transaction(
        "x2", original: "x1", purchase: 10_000_000, expires: 20_000_000, signed: 12_000_500, revoked: 11_999_000)
      _ = try await store.ingest([restore("u1", [refund], at: nil)], atMs: 12_000_600)
      #expect(try await events(store, "u1", after: refundFrom).map(\.type).contains(.refunded))
      #expect(try await events(store, "u2", after: refundFrom).isEmpty)
      // Neither user's scheduler run yields anything of the other's time now.
      let later = try await store.appendDueTransitionEvents(atMs: 30_000_000, limit: 100)
      #expect(later.allSatisfy { $0.event.userId == "u1" })
      runs.append(
        try await events(store, "u1", after: start).map(\.eventId) + events(store, "u2", after: start).map(\.eventId))
    }
    // The same history again (after erasure) gives the same ids.
    #expect(runs[0] == runs[1])

    // KEEP_FIRST: the refused user stores none of it and gets no event of it.
    _ = try await store.setPolicy(appId: "a1", policy: EligibilityPolicy(purchaseSharing: .keepFirst))
    let refusedFrom = try await store.lastEventSequence()
    let refused = try await store.ingest([restore("u3", [x1, x2], at: 13_000_000)], atMs: 13_000_000)
    #expect(refused.refused.count == 1 && refused.eventsAppended == 0)
    #expect(try await events(store, "u3", after: refusedFrom).isEmpty)
  }
}
