// Purchase sharing in the stores: who owns an original transaction that several users of an app
// submitted (docs/architecture.md "Access model"). The rules live here once; each store only
// reads and writes its rows through an ``OwnershipLedger`` inside the ingest's own commit.
import SubscriptionDomain

/// One change of owner of an original transaction: under ``SubscriptionDomain/PurchaseSharing/transfer``
/// a submission by `newUserId` took it from `previousUserId` (one record per previous owner).
/// Stores keep every transfer in the commit of the submission that made it; it is what an
/// `OWNERSHIP_TRANSFERRED` event is derived from. Erasing either user erases the record.
public struct OwnershipTransfer: Sendable, Hashable, Codable {
  /// The app.
  public var appId: String
  /// The environment of the original transaction.
  public var environment: Environment
  /// The original transaction that changed owner.
  public var originalTransactionId: String
  /// Who lost it.
  public var previousUserId: String
  /// Who has it since ``atMs``.
  public var newUserId: String
  /// The instant of the submission (the server's clock at ingest).
  public var atMs: Int64

  /// Creates a record.
  public init(
    appId: String, environment: Environment, originalTransactionId: String, previousUserId: String,
    newUserId: String, atMs: Int64
  ) {
    self.appId = appId
    self.environment = environment
    self.originalTransactionId = originalTransactionId
    self.previousUserId = previousUserId
    self.newUserId = newUserId
    self.atMs = atMs
  }
}

/// An original transaction of an update that was not stored for its user because another user
/// owns it: a submission under ``SubscriptionDomain/PurchaseSharing/keepFirst``, or a write that is
/// not a submission (which never changes owners) under a policy other than SHARE.
public struct OwnershipRefusal: Sendable, Hashable {
  /// The user whose update it was.
  public var user: UserKey
  /// The original transaction refused: none of its transactions and renewal infos was stored.
  public var originalTransactionId: String

  /// Creates a refusal.
  public init(user: UserKey, originalTransactionId: String) {
    self.user = user
    self.originalTransactionId = originalTransactionId
  }
}

/// What a store's ingest commit reads and writes of ownership, for one app and environment. The
/// store implements it over its own tables, in the same transaction as the purchase data.
package protocol OwnershipLedger {
  /// The users whose stored transactions hold `originalTransactionId` (owners or not).
  mutating func holders(of originalTransactionId: String) throws(StoreError) -> Set<String>
  /// The users whose gap on `originalTransactionId` is open (they lost it and own it no more).
  mutating func usersWithOpenGap(on originalTransactionId: String) throws(StoreError) -> Set<String>
  /// Records a gap of `userId` (``SubscriptionDomain/OwnershipGap``).
  mutating func insertGap(userId: String, _ gap: OwnershipGap) throws(StoreError)
  /// Closes `userId`'s open gap on `originalTransactionId` at `atMs` (they own it again).
  mutating func closeGap(userId: String, originalTransactionId: String, atMs: Int64) throws(StoreError)
  /// Records a transfer.
  mutating func recordTransfer(_ transfer: OwnershipTransfer) throws(StoreError)
  /// Writes the outbox row of the original transaction's new `appAccountToken`
  /// (``AppAccountTokenWriteStore``): inserted, or the row of that original transaction replaced
  /// by ``AppAccountTokenWrite/replacing(_:by:)``.
  mutating func saveAppAccountTokenWrite(for transfer: OwnershipTransfer) throws(StoreError)
  /// `userId`'s stored transactions and present renewal infos of `originalTransactionId`
  /// (read under ``SubscriptionDomain/PurchaseSharing/transferIfNoActive`` only).
  mutating func purchases(of userId: String, originalTransactionId: String) throws(StoreError)
    -> (transactions: [Transaction], renewals: [RenewalInfo])
  /// The app's catalog and policy, as the commit has them (read under
  /// ``SubscriptionDomain/PurchaseSharing/transferIfNoActive`` only).
  mutating func evaluationInputs() throws(StoreError) -> (catalog: Catalog, policy: EligibilityPolicy)
}

/// The data of an update, of which ``PurchaseOwnership`` reads what
/// ``SubscriptionDomain/PurchaseSharing/transferIfNoActive`` asks: the submitted transactions and
/// renewal infos, newer than an owner's stored copy where they differ.
package struct SubmittedPurchases {
  /// The update's transactions.
  package var transactions: [Transaction]
  /// The update's renewal infos.
  package var renewals: [RenewalInfo]

  /// Creates the view.
  package init(transactions: [Transaction], renewals: [RenewalInfo]) {
    self.transactions = transactions
    self.renewals = renewals
  }
}

/// An app's purchase sharing as an ingest commit reads it (each SQL store reads it from its `apps`
/// row in the commit).
package struct OwnershipPolicy: Sendable {
  /// The app's policy for production data.
  package var sharing: PurchaseSharing
  /// The app's policy for sandbox data (``SubscriptionDomain/EligibilityPolicy/purchaseSharing(in:)``).
  package var sandboxSharing: PurchaseSharing
  /// Whether the policy was ever other than SHARE (``AppRecord/ownershipTracked``).
  package var tracked: Bool

  /// Creates a policy.
  package init(sharing: PurchaseSharing, sandboxSharing: PurchaseSharing? = nil, tracked: Bool) {
    self.sharing = sharing
    self.sandboxSharing = sandboxSharing ?? sharing
    self.tracked = tracked
  }

  /// An app's stored policy.
  package init(_ policy: EligibilityPolicy, tracked: Bool) {
    self.init(
      sharing: policy.purchaseSharing(in: .production), sandboxSharing: policy.purchaseSharing(in: .sandbox),
      tracked: tracked)
  }

  /// The policy applied to data of `environment`.
  package func sharing(in environment: Environment) -> PurchaseSharing {
    environment == .sandbox ? sandboxSharing : sharing
  }

  /// Whether the app has ownership rows to read (its policy left SHARE at some time).
  package var needsLedger: Bool { tracked || sharing != .share || sandboxSharing != .share }
}

/// The purchase sharing rules a store applies to each update of an ingest, in its commit.
public enum PurchaseOwnership {
  /// The pseudo-user that holds what Apple's notifications brought for an original transaction no
  /// user has submitted yet (so nothing is lost). It is never an owner: the rules ignore it.
  public static func unclaimedUserId(originalTransactionId: String) -> String {
    "apple:\(originalTransactionId)"
  }

  /// Settles who owns the original transactions of one user's update and returns those not to
  /// store for the user, with the transfers made.
  ///
  /// - A submission (`submittedMs` set) follows `sharing`: SHARE gives the user the original
  ///   transaction (again, if they had lost it); TRANSFER takes it from its other owners at
  ///   `submittedMs` (a user who had no copy of it did not own it before); KEEP_FIRST refuses it
  ///   when another user owns it.
  /// - Any other write (a notification, a background refresh) changes no owner: its data is
  ///   stored for a user who holds the original transaction, and for one who does not only under
  ///   SHARE or when nobody owns it.
  /// - An app whose policy never left SHARE (`tracked` false) has no ownership rows: nothing is
  ///   read, nothing refused.
  ///
  /// - Parameters:
  ///   - user: whose update it is.
  ///   - originalTransactionIds: the original transactions of its transactions and renewal infos.
  ///   - submittedMs: the instant of a submission (the server's clock); `nil` for other writes.
  ///   - sharing: the app's policy at the commit.
  ///   - tracked: whether the app's policy was ever other than SHARE (``AppRecord/ownershipTracked``).
  ///   - ledger: the store's rows, in the commit.
  ///   - assigned: the original transactions of the update whose ownership is `ASSIGNED` (rule 23:
  ///     an organization's assignment is never moved between app users, so TRANSFER and
  ///     TRANSFER_IF_NO_ACTIVE keep it with its first owner, as KEEP_FIRST does).
  ///   - submitted: the update's data. TRANSFER_IF_NO_ACTIVE evaluates each current owner's copy
  ///     of the original transaction with it (``SubscriptionDomain/PurchaseSharing/entitles(originalTransactionId:transactions:renewals:catalog:policy:at:)``)
  ///     at `submittedMs`: any owner entitled keeps it, as under KEEP_FIRST; none entitled, it
  ///     transfers.
  package static func settle<Ledger: OwnershipLedger>(
    user: UserKey, originalTransactionIds: Set<String>, submittedMs: Int64?,
    sharing: PurchaseSharing, tracked: Bool, ledger: inout Ledger, assigned: Set<String> = [],
    submitted: SubmittedPurchases = SubmittedPurchases(transactions: [], renewals: [])
  ) throws(StoreError) -> (refused: [String], transfers: [OwnershipTransfer]) {
    guard tracked || sharing != .share else { return ([], []) }
    var refused: [String] = []
    var transfers: [OwnershipTransfer] = []
    var inputs: (catalog: Catalog, policy: EligibilityPolicy)?
    for otid in originalTransactionIds.sorted() {
      let unclaimed = unclaimedUserId(originalTransactionId: otid)
      if user.userId == unclaimed { continue }
      var holders = try ledger.holders(of: otid)
      holders.remove(unclaimed)
      let lost = try ledger.usersWithOpenGap(on: otid)
      let holds = holders.contains(user.userId)
      let hasLost = lost.contains(user.userId)
      let others = holders.subtracting(lost).subtracting([user.userId])
      guard let at = submittedMs else {
        if !holds && sharing != .share && !others.isEmpty { refused.append(otid) }
        continue
      }
      var applied = sharing
      if assigned.contains(otid) && (sharing == .transfer || sharing == .transferIfNoActive) {
        applied = .keepFirst
      } else if sharing == .transferIfNoActive {
        applied = .transfer
        if inputs == nil { inputs = try ledger.evaluationInputs() }
        let (catalog, policy) = inputs ?? (Catalog(products: []), .default)
        for owner in others.sorted() {
          let copy = try ledger.purchases(of: owner, originalTransactionId: otid)
          if PurchaseSharing.entitles(
            originalTransactionId: otid, transactions: copy.transactions + submitted.transactions,
            renewals: copy.renewals + submitted.renewals, catalog: catalog, policy: policy, at: at)
          {
            applied = .keepFirst
            break
          }
        }
      }
      switch applied {
      case .transferIfNoActive: preconditionFailure("settled above as TRANSFER or KEEP_FIRST")
      case .share:
        if hasLost { try ledger.closeGap(userId: user.userId, originalTransactionId: otid, atMs: at) }
      case .transfer:
        for previous in others.sorted() {
          try ledger.insertGap(
            userId: previous, OwnershipGap(originalTransactionId: otid, fromMs: at, untilMs: nil))
          let transfer = OwnershipTransfer(
            appId: user.appId, environment: user.environment, originalTransactionId: otid,
            previousUserId: previous, newUserId: user.userId, atMs: at)
          try ledger.recordTransfer(transfer)
          transfers.append(transfer)
        }
        // Rule 26: Apple is told the new owner in the background, from a row of this commit.
        if let last = transfers.last, !others.isEmpty { try ledger.saveAppAccountTokenWrite(for: last) }
        if hasLost {
          try ledger.closeGap(userId: user.userId, originalTransactionId: otid, atMs: at)
        } else if !holds && !others.isEmpty {
          try ledger.insertGap(
            userId: user.userId, OwnershipGap(originalTransactionId: otid, fromMs: nil, untilMs: at))
        }
      case .keepFirst:
        if holds && !hasLost { continue }
        if !others.isEmpty {
          refused.append(otid)
        } else if hasLost {
          try ledger.closeGap(userId: user.userId, originalTransactionId: otid, atMs: at)
        }
      }
    }
    return (refused, transfers)
  }

  /// Applies purchase sharing to one encoded update in a SQL store's commit (``settle(user:originalTransactionIds:submittedMs:sharing:tracked:ledger:)``)
  /// and returns what to store; refusals and transfers go to `summary`.
  ///
  /// - Parameters:
  ///   - update: the update as submitted.
  ///   - policy: its app's policy, read in the commit (`nil`: the app is not in the batch's policies).
  ///   - summary: the ingest's summary.
  ///   - ledger: the store's ledger for the update's app and environment (read only when the
  ///     policy needs it).
  package static func settle<Ledger: OwnershipLedger>(
    _ update: EncodedPurchases, policy: OwnershipPolicy?, summary: inout IngestSummary,
    ledger: inout Ledger
  ) throws(StoreError) -> EncodedPurchases {
    guard let policy, policy.needsLedger else { return update }
    let sharing = policy.sharing(in: update.user.environment)
    let (refused, transfers) = try settle(
      user: update.user, originalTransactionIds: update.originalTransactionIds,
      submittedMs: update.submittedMs, sharing: sharing, tracked: policy.tracked, ledger: &ledger,
      assigned: update.assignedOriginalTransactionIds,
      submitted: sharing == .transferIfNoActive ? update.submittedPurchases : SubmittedPurchases(transactions: [], renewals: []))
    summary.transfers += transfers
    summary.refused += refused.map { OwnershipRefusal(user: update.user, originalTransactionId: $0) }
    return update.removing(originalTransactionIds: refused)
  }
}
