import SubscriptionDomain

/// Erasure of users: everything stored of them, in every table, in one commit (the AdminService's
/// DeleteUser).
///
/// Part of ``Store``; a handler or job that needs only this asks for `any ErasureStore` (with
/// ``PurchaseStore`` to find who else holds a user's original transactions).
public protocol ErasureStore: Sendable {
  // MARK: User erasure

  /// Erases users of an app in every environment, in one commit: their transactions, renewal
  /// infos and the removals snapshots recorded for them, stored receipts, Server API sync states,
  /// ownership gaps and the ownership transfers that name them, and the users themselves. Nothing of them is left in any table; a user id with no data
  /// erases nothing.
  /// - Returns: how much was erased.
  /// - Throws: `notFound` for an unknown app; `invalidArgument` for an empty user id.
  func deleteUsers(appId: String, userIds: [String]) async throws(StoreError) -> UserErasure
}
