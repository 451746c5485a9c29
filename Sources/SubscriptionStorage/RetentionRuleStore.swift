// Where an app's retention rules are kept (docs/architecture.md "Retention Messaging"): one
// document per app, replaced whole by AdminService.PutRetentionRules.

/// An app's stored retention rules: the bytes the service encoded (the protobuf
/// `substatus.v1.RetentionRules` message, which the store does not read) and when they were put.
public struct StoredRetentionRules: Sendable, Hashable {
  /// The encoded rules.
  public var payload: [UInt8]
  /// When they were put.
  public var updatedMs: Int64

  /// Creates a stored rule set.
  public init(payload: [UInt8], updatedMs: Int64) {
    self.payload = payload
    self.updatedMs = updatedMs
  }
}

/// Where the stores keep each app's retention rules. The SQLite, PostgreSQL and in-memory stores
/// conform.
public protocol RetentionRuleStore: Sendable {
  /// Stores the app's rules, replacing any stored before.
  /// - Throws: `notFound` (app), `invalidArgument` (empty payload, or above 1 MiB).
  func putRetentionRules(appId: String, rules: StoredRetentionRules) async throws(StoreError)

  /// The app's rules; `nil` when none were ever put (or the app does not exist).
  func retentionRules(appId: String) async throws(StoreError) -> StoredRetentionRules?
}

extension StoreValidation {
  /// The largest encoded rule set a store accepts.
  public static let maxRetentionRulesBytes = 1 << 20

  /// Checks a rule set's payload: non-empty and at most ``maxRetentionRulesBytes``.
  /// - Throws: `invalidArgument` naming the problem.
  public static func validate(retentionRules rules: StoredRetentionRules) throws(StoreError) {
    guard !rules.payload.isEmpty else { throw StoreError(.invalidArgument, "retention rules are empty") }
    guard rules.payload.count <= maxRetentionRulesBytes else {
      throw StoreError(.invalidArgument, "retention rules are larger than \(maxRetentionRulesBytes) bytes")
    }
  }
}
