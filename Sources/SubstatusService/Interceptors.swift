import Foundation
import RPCCore
import Synchronization
import SubscriptionStorage
import SubstatusServiceAPI
import SubstatusWire

/// Which roles may call each method: what each RPC of substatus.v1 declares in its
/// `(substatus.v1.required_role)` option (`Protos/substatus/v1/options.proto`), from the table code
/// generation makes of it (``ProtoMethodOptions/requiredRoles``; a method that declares none fails
/// generation). Methods of other packages (health, reflection) need no key; a path under
/// `substatus.` that no RPC has needs an ADMIN key, as an unknown method is refused to the others.
enum MethodPolicy {
  static let operatorOnly: Set<ApiKeyRecord.Role> = [.operator]
  static let admin: Set<ApiKeyRecord.Role> = [.admin]
  static let ingest: Set<ApiKeyRecord.Role> = [.admin, .ingest]
  static let read: Set<ApiKeyRecord.Role> = [.admin, .ingest, .read]
  static let anyKey: Set<ApiKeyRecord.Role> = [.operator, .admin, .ingest, .read]

  /// The roles a declared requirement lets call: a tenant's roles include the ones below them
  /// (ADMIN > INGEST > READ); the operator key is no tenant's and calls only what names it.
  static func roles(for required: Substatus_V1_RequiredRole) -> Set<ApiKeyRecord.Role> {
    switch required {
    case .read: read
    case .ingest: ingest
    case .admin: admin
    case .operator: operatorOnly
    case .anyKey: anyKey
    // Never in the table (generation refuses them): no key may call.
    case .unspecified, .UNRECOGNIZED: []
    }
  }

  /// The roles by full method path, for every method that declares a requirement: built once, read
  /// without a lock.
  static let table: [String: Set<ApiKeyRecord.Role>] = ProtoMethodOptions.requiredRoles.mapValues(roles(for:))

  /// The roles that may call `method` (a full path); `nil` when it needs no key.
  static func roles(forMethod method: String) -> Set<ApiKeyRecord.Role>? {
    if let roles = table[method] { return roles }
    return method.hasPrefix("/substatus.") ? admin : nil
  }
}

/// Authenticates `authorization: Bearer <key>`, checks the role for the method and the tenant's
/// rate limit, and attaches the ``Principal`` for the handlers.
///
/// Errors: no or malformed header → `UNAUTHENTICATED`; unknown or revoked key → `UNAUTHENTICATED`;
/// wrong role or disabled tenant → `PERMISSION_DENIED`; over the rate → `RESOURCE_EXHAUSTED` with a
/// `google.rpc.RetryInfo`.
struct AuthInterceptor: ServerInterceptor {
  let service: SubstatusService

  func intercept(_ context: ServerContext, next: (ServerContext) async throws -> Void) async throws {
    guard let roles = MethodPolicy.roles(forMethod: context.method) else { return try await next(context) }
    guard let header = Self.authorization(context.metadata) else {
      throw RPCError(code: .unauthenticated, message: "missing authorization: send \"authorization: Bearer <key>\"")
    }
    let (record, tenantDisabled) = try await service.lookUpKey(authorization: header)
    guard !record.isRevoked else { throw RPCError(code: .unauthenticated, message: "the API key is revoked") }
    guard !tenantDisabled else { throw RPCError(code: .permissionDenied, message: "the tenant is disabled") }
    guard roles.contains(record.role) else {
      throw RPCError(code: .permissionDenied, message: "a \(record.role.rawValue) key may not call \(context.method)")
    }
    if let tenant = record.tenantId, let wait = service.rateLimiter.take(tenant: tenant, now: service.environment.now()) {
      var retry = Google_Rpc_RetryInfo()
      retry.retryDelay = Google_Protobuf_Duration()
      retry.retryDelay?.seconds = Int64(wait / 1000)
      retry.retryDelay?.nanos = Int32((wait % 1000) * 1_000_000)
      var status = Google_Rpc_Status()
      status.code = Int32(RPCError.Code.resourceExhausted.rawValue)
      status.message = "tenant request rate exceeded; retry in \(wait) ms"
      status.details = [Google_Protobuf_Any(packing: retry)]
      var error = RPCError(code: .resourceExhausted, message: status.message)
      error.metadata.addBinary(status.serializedBytes(), forKey: "grpc-status-details-bin")
      throw error
    }
    var context = context
    let principal = Principal(keyId: record.keyId, tenantId: record.tenantId, role: record.role, appIds: record.appIds)
    context[PrincipalKey.self] = principal
    context[CallerKeyRecordKey.self] = record
    context[RPCAnnotations.Key.self]?.principal.withLock { $0 = principal }
    try await next(context)
  }
}

extension AuthInterceptor {
  /// The first `authorization` value (its name compared without case and without building a
  /// string, as HTTP/1.1 peers may capitalize it).
  static func authorization(_ metadata: Metadata) -> String? {
    for element in metadata where element.key.utf8.count == 13 {
      guard case .string(let value) = element.value else { continue }
      if element.key.utf8.elementsEqual("authorization".utf8, by: { $0 | 0x20 == $1 }) { return value }
    }
    return nil
  }

  /// The key of `Bearer <key>` (the scheme without case).
  static func bearerKey(_ header: String) -> Substring? {
    let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
    guard parts.count == 2, parts[0].lowercased() == "bearer", !parts[1].isEmpty, parts[1].utf8.count <= 256 else {
      return nil
    }
    return parts[1]
  }
}

extension SubstatusService {
  /// The key record for an `authorization` header's value, cached briefly by the header's exact
  /// text (a hit hashes and parses nothing); throws UNAUTHENTICATED for a malformed header or an
  /// unknown key. Revoking a key or disabling its tenant removes its entries at once
  /// (``revokeApiKey(_:_:)``, ``disableTenant(_:_:)``); other instances see it within the TTL.
  func lookUpKey(authorization header: String) async throws(RPCError) -> (ApiKeyRecord, Bool) {
    let now = environment.now()
    if let hit = keys.withLock({ $0[header] }), now - hit.fetchedMs < limits.cacheTTLMilliseconds {
      return (hit.record, hit.tenantDisabled)
    }
    guard let key = AuthInterceptor.bearerKey(header) else {
      throw RPCError(code: .unauthenticated, message: "malformed authorization: expected \"Bearer <key>\"")
    }
    let hash = SHA256.hash(Array(key.utf8))
    guard let record = try await stored({ () throws(StoreError) in try await tenantStore.apiKey(hash: hash) }) else {
      throw RPCError(code: .unauthenticated, message: "unknown API key")
    }
    var disabled = false
    if let tenant = record.tenantId {
      disabled = (try? await tenantStore.tenant(id: tenant))?.disabled ?? true
    }
    keys.withLock {
      if $0.count > 10_000 { $0.removeAll() }
      $0[header] = CachedKey(record: record, tenantDisabled: disabled, fetchedMs: now)
    }
    if !record.isRevoked { _ = try? await tenantStore.touchApiKey(keyId: record.keyId, atMs: now) }
    return (record, disabled)
  }
}

/// Token buckets per tenant.
final class TenantRateLimiter: Sendable {
  let rate: Double
  let burst: Double
  private let buckets = Mutex<[String: (tokens: Double, atMs: Int64)]>([:])

  init(rate: Double, burst: Double) {
    self.rate = rate
    self.burst = max(1, burst)
  }

  /// Takes a token; returns `nil` if allowed, or the milliseconds until one is available.
  func take(tenant: String, now: Int64) -> Int64? {
    guard rate > 0 else { return nil }
    return buckets.withLock { buckets in
      var b = buckets[tenant] ?? (burst, now)
      b.tokens = min(burst, b.tokens + Double(max(0, now - b.atMs)) * rate / 1000)
      b.atMs = now
      defer { buckets[tenant] = b }
      if b.tokens >= 1 {
        b.tokens -= 1
        return nil
      }
      return Int64(((1 - b.tokens) / rate * 1000).rounded(.up))
    }
  }
}

/// Writes one JSON line per RPC (method, protocol and codec, tenant, key id, status, duration; never
/// a key or a secret)
/// and records the RPC's metrics.
struct AccessLogInterceptor: ServerInterceptor {
  let service: SubstatusService

  func intercept(_ context: ServerContext, next: (ServerContext) async throws -> Void) async throws {
    let started = service.environment.clock.monotonicNow
    let annotations = RPCAnnotations()
    var context = context
    context[RPCAnnotations.Key.self] = annotations
    var code = RPCError.Code.ok
    var failure: String? = nil
    defer {
      // The reply is encoded (or the call failed): its working set is the transport's to count.
      // (A load first: most calls reserve nothing, and a load writes nothing.)
      if annotations.workingSet.load(ordering: .relaxed) > 0 {
        service.workingSetBudget.release(annotations.workingSet.exchange(0, ordering: .relaxed))
      }
      let seconds = (service.environment.clock.monotonicNow - started).seconds
      service.metrics.rpc(method: context.method, code: code, seconds: seconds, rpcProtocol: context.rpcProtocol)
      // Written byte by byte (``JSONLine``): the same text as a serialized JSONObject, at a
      // fraction of the cost on every call.
      var line = JSONLine()
      line.append("ts", integer: service.environment.now())
      line.append("level", string: code == .ok ? "info" : "warn")
      line.append("msg", string: "rpc")
      line.append("method", string: context.method)
      line.append("protocol", string: context.rpcProtocol.rawValue)
      line.append("codec", string: context.codec.rawValue)
      line.append("status", string: code.description)
      line.append("duration_ms", milliseconds: Int64((seconds * 1e6).rounded()))
      line.append("peer", string: context.peer)
      if let failure { line.append("error", string: failure) }
      if let principal = annotations.principal.withLock({ $0 }) {
        line.append("key_id", string: principal.keyId)
        if let tenant = principal.tenantId { line.append("tenant", string: tenant) }
      }
      service.log.write(line: line.finish())
    }
    do {
      try await next(context)
    } catch {
      let mapped = RPCError(mapping: error)
      code = mapped.code
      // Cut as the transports cut it (not counted again): a message may quote a client's input.
      failure = ErrorText.truncated(mapped.message, maxBytes: StatusBounds.maxMessageBytes)
      throw error
    }
  }
}

/// What inner interceptors and the handler tell the outermost interceptor about an RPC: the
/// principal the access log reports, and the working set the call reserved.
final class RPCAnnotations: Sendable {
  enum Key: ServerContextKey { typealias Value = RPCAnnotations }
  let principal = Mutex<Principal?>(nil)
  /// Bytes the call reserved in ``SubstatusService/workingSetBudget``
  /// (``SubstatusService/reserveWorkingSet(_:_:)``), given back when the call ends.
  let workingSet = Atomic<Int>(0)
}

extension SubstatusService {
  /// Reserves a call's estimated working set (``WorkingSetEstimate``) before it reads the store;
  /// the access-log interceptor gives it back once the reply is encoded and handed to the
  /// transport, or the call has failed or been cancelled. A call served without the service's
  /// interceptors (``interceptors()``) reserves nothing.
  /// - Throws: ``WorkingSetBudget/refusal`` (`RESOURCE_EXHAUSTED` with a `RetryInfo`) when the
  ///   budget has no room.
  func reserveWorkingSet(_ bytes: Int, _ context: ServerContext) throws(RPCError) {
    guard let annotations = context[RPCAnnotations.Key.self] else { return }
    guard let granted = workingSetBudget.reserve(bytes) else { throw WorkingSetBudget.refusal }
    annotations.workingSet.wrappingAdd(granted, ordering: .relaxed)
  }
}
