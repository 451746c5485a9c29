import SubscriptionDomain
import SubscriptionStorage

/// An app as the handlers and the background jobs use it: its record, catalog and named
/// entitlements, read together and cached by the service's `loadApp` (`ServiceLimits.cacheTTLMilliseconds`).
package struct CachedApp: Sendable {
  /// The app's record (tenant, bundle id, policy, keys' metadata).
  package var app: AppRecord
  /// The app's products.
  package var catalog: Catalog
  /// The named entitlement definitions, ordered by id.
  package var entitlements: [EntitlementDefinition]
  /// When it was read (service clock, ms).
  package var fetchedMs: Int64
  /// The catalog's and policy's fingerprint, computed once: stored summaries answer only for it.
  package var summaryFingerprint: SummaryFingerprint

  /// An entry read at `fetchedMs`.
  package init(app: AppRecord, catalog: Catalog, entitlements: [EntitlementDefinition], fetchedMs: Int64) {
    self.app = app
    self.catalog = catalog
    self.entitlements = entitlements
    self.fetchedMs = fetchedMs
    self.summaryFingerprint = SummaryFingerprint(catalog: catalog, policy: app.policy)
  }
}
