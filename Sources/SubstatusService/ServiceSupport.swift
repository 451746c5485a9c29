import Foundation
import RPCCore
import SubscriptionDomain
import SubscriptionStorage
import SubstatusClock
import SubstatusBackgroundJobs
import SubstatusServiceCore
import SubstatusWire

/// Limits on request sizes and rates; exceeding one is `RESOURCE_EXHAUSTED`
/// (docs/architecture.md "Security": oversized batches, like oversized messages, and rates), a
/// batch's with a message naming the field, the limit and the count (README "Request limits and
/// whole strings").
public struct ServiceLimits: Sendable {
  /// Users per CheckEligibility call.
  public var maxEligibilityQueries = 1000
  /// Products per user in a CheckEligibility call.
  public var maxProductsPerQuery = 200
  /// Users × products per CheckEligibility call.
  public var maxEligibilityItems = 10_000
  /// Products per PutProducts call.
  public var maxProductsPerPut = 1000
  /// Transactions (and renewal infos) per ImportTransactions call.
  public var maxImportItems = 1000
  /// The longest id accepted (user, app, product ids), in bytes.
  public var maxIdLength = 255
  /// Default page size of list calls.
  public var defaultPageSize = 50
  /// Largest page size of list calls.
  public var maxPageSize = 1000
  /// Requests per second per tenant (token bucket refill rate); 0 turns rate limiting off.
  public var tenantRequestsPerSecond: Double = 0
  /// Bucket size of the per-tenant rate limit.
  public var tenantBurst: Double = 100
  /// How long a previous shared secret stays valid by default after a rotation.
  public var defaultSecretOverlapSeconds: Int64 = 7 * 86_400
  /// The longest overlap a caller may ask for.
  public var maxSecretOverlapSeconds: Int64 = 30 * 86_400
  /// How long an API key lookup, an app and its catalog are cached (changes made through this
  /// instance are seen at once; other instances' changes after at most this long).
  public var cacheTTLMilliseconds: Int64 = 5_000
  /// Webhooks per app and per tenant (CreateWebhook beyond is `RESOURCE_EXHAUSTED`).
  public var webhooks = WebhookLimits()
  /// When stored receipts are verified again in the background (see ``ReceiptRefresher``).
  public var receiptRefresh = ReceiptRefreshPolicy()
  /// The estimated working set that calls in flight may hold at once (``WorkingSetBudget``,
  /// `--max-working-set-bytes`); `nil` is unlimited.
  public var maxWorkingSetBytes: Int? = WorkingSetBudget.defaultLimitBytes

  /// The defaults.
  public init() {}
}

/// Who is calling: the API key that authenticated the RPC.
public struct Principal: Sendable, Hashable {
  /// The key's id.
  public var keyId: String
  /// The key's tenant; `nil` for the operator key.
  public var tenantId: String?
  /// The key's role.
  public var role: ApiKeyRecord.Role
  /// The apps the key is limited to; empty means every app of the tenant.
  public var appIds: [String]

  /// Whether the key may reach an app (its scope).
  public func mayAccess(appId: String) -> Bool { appIds.isEmpty || appIds.contains(appId) }

  /// Whether the key is limited to some apps of its tenant.
  public var isScoped: Bool { !appIds.isEmpty }

  /// Whether the key may see and manage (list, revoke, create) a key with scope `scope`: an
  /// unscoped key manages every key of its tenant; a scoped key only keys limited to a non-empty
  /// subset of its own apps, never an unscoped one (docs/architecture.md "Security": a key scoped
  /// to apps acts only inside them).
  public func mayManage(keyScopedTo scope: [String]) -> Bool {
    !isScoped || (!scope.isEmpty && scope.allSatisfy(appIds.contains))
  }
}

/// The context key under which the auth interceptor stores the ``Principal``.
public enum PrincipalKey: ServerContextKey {
  /// The principal.
  public typealias Value = Principal
}

/// The context key under which the auth interceptor stores the calling key's record (for
/// AdminService.GetCallerApiKey, which describes it).
enum CallerKeyRecordKey: ServerContextKey {
  typealias Value = ApiKeyRecord
}

/// AIP-158 page tokens: opaque to callers, wrapping the store's cursor.
enum PageToken {
  static func encode(_ cursor: String?) -> String {
    guard let cursor else { return "" }
    return Data(("v1:" + cursor).utf8).base64EncodedString()
      .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
      .replacingOccurrences(of: "=", with: "")
  }

  static func decode(_ token: String, field: String = "page_token") throws(RPCError) -> String? {
    guard !token.isEmpty else { return nil }
    var b64 = token.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
    while b64.count % 4 != 0 { b64 += "=" }
    guard let data = Data(base64Encoded: b64), let text = String(data: data, encoding: .utf8), text.hasPrefix("v1:") else {
      throw invalidArgument(field, "not a page token returned by this service")
    }
    return String(text.dropFirst(3))
  }

  static func page(size: Int32, token: String, limits: ServiceLimits) throws(RPCError) -> PageRequest {
    guard size >= 0 else { throw invalidArgument("page_size", "must not be negative") }
    let n = size == 0 ? limits.defaultPageSize : min(Int(size), limits.maxPageSize)
    return PageRequest(size: n, cursor: try decode(token))
  }
}

/// `RESOURCE_EXHAUSTED` for a batch above its limit, the one code of every batch limit
/// (docs/architecture.md "Security"; README "Request limits and whole strings"). The message names
/// the field, the limit and the count:
/// `queries: at most 1000 per call, got 1001`.
func batchTooLarge(_ field: String, limit: Int, count: Int, per: String = "call") -> RPCError {
  RPCError(code: .resourceExhausted, message: "\(field): at most \(limit) per \(per), got \(count)")
}

/// Identifier checks shared by the handlers.
func requireID(_ value: String, _ field: String, limits: ServiceLimits) throws(RPCError) {
  guard !value.isEmpty else { throw invalidArgument(field, "must not be empty") }
  guard value.utf8.count <= limits.maxIdLength else {
    throw invalidArgument(field, "longer than \(limits.maxIdLength) bytes")
  }
  guard !DisplayText.hasControl(value) else { throw invalidArgument(field, "contains control characters") }
}

/// Random identifiers and keys.
enum Identifiers {
  static let alphabet = Array("abcdefghijkmnpqrstuvwxyz23456789")

  /// A prefixed random id such as `app_4kq8w2n7mx3p`.
  static func make(_ prefix: String, _ environment: ServiceEnvironment) -> String {
    prefix + "_" + String(environment.randomBytes(12).map { alphabet[Int($0) % alphabet.count] })
  }

  /// A new API key: `sk_` then 43 base64url characters (32 random bytes).
  static func apiKey(_ environment: ServiceEnvironment) -> String {
    "sk_" + Data(environment.randomBytes(32)).base64EncodedString()
      .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
      .replacingOccurrences(of: "=", with: "")
  }

  /// What listings show of a key: enough to tell keys apart, too little to use.
  static func displayPrefix(_ key: String) -> String { String(key.prefix(10)) + "…" }
}
