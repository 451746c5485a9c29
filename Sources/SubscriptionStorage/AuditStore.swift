import SubscriptionDomain

/// The append-only audit log of administrative changes (who changed what, when).
///
/// Part of ``Store``; a handler or job that needs only this asks for `any AuditStore`.
public protocol AuditStore: Sendable {
  // MARK: Audit

  /// Appends an entry and returns it with its sequence number.
  func appendAudit(_ entry: AuditEntry) async throws(StoreError) -> AuditEntry
  /// The tenant's audit entries (`nil`: operator entries), oldest first.
  func auditLog(tenantId: String?, page: PageRequest) async throws(StoreError) -> Page<AuditEntry>
}
