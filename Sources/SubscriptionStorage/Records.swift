// The records a Store keeps besides the domain's own types. Ids are chosen by the caller (the
// service), times are milliseconds since the epoch passed in by the caller: the store reads no clock.

/// A tenant: one customer of substatus, owning apps and API keys.
public struct TenantRecord: Sendable, Hashable, Codable {
  /// The tenant id (chosen by the service).
  public var tenantId: String
  /// A display name.
  public var name: String
  /// A disabled tenant's keys are refused.
  public var disabled: Bool
  /// When it was created, ms since the epoch.
  public var createdMs: Int64

  /// Creates a tenant record.
  public init(tenantId: String, name: String, disabled: Bool = false, createdMs: Int64) {
    self.tenantId = tenantId
    self.name = name
    self.disabled = disabled
    self.createdMs = createdMs
  }
}

/// An API key as stored: its SHA-256 hash, never the key itself.
public struct ApiKeyRecord: Sendable, Hashable, Codable {
  /// What a key may do.
  public enum Role: String, Sendable, Hashable, Codable, CaseIterable {
    /// Manages tenants and nothing inside them; has no tenant.
    case `operator` = "OPERATOR"
    /// Everything inside its tenant.
    case admin = "ADMIN"
    /// Writes purchase data and reads it back.
    case ingest = "INGEST"
    /// Reads only.
    case read = "READ"
  }

  /// The key's public id (used to list and revoke it).
  public var keyId: String
  /// The owning tenant; `nil` exactly for ``Role-swift.enum/operator`` keys.
  public var tenantId: String?
  /// The role.
  public var role: Role
  /// The apps the key is limited to; empty means every app of the tenant.
  public var appIds: [String]
  /// Free text from the admin.
  public var description: String
  /// SHA-256 of the key (32 bytes); unique.
  public var keyHash: [UInt8]
  /// The first characters of the key, shown in listings so people can tell keys apart.
  public var displayPrefix: String
  /// When it was created.
  public var createdMs: Int64
  /// When it was last used (updated by ``TenantStore/touchApiKey(keyId:at:)``), if ever.
  public var lastUsedMs: Int64?
  /// When it was revoked, if it was.
  public var revokedMs: Int64?

  /// Creates a key record.
  public init(
    keyId: String, tenantId: String?, role: Role, appIds: [String] = [], description: String = "",
    keyHash: [UInt8], displayPrefix: String, createdMs: Int64, lastUsedMs: Int64? = nil,
    revokedMs: Int64? = nil
  ) {
    self.keyId = keyId
    self.tenantId = tenantId
    self.role = role
    self.appIds = appIds
    self.description = description
    self.keyHash = keyHash
    self.displayPrefix = displayPrefix
    self.createdMs = createdMs
    self.lastUsedMs = lastUsedMs
    self.revokedMs = revokedMs
  }

  /// Whether the key is revoked.
  public var isRevoked: Bool { revokedMs != nil }
}

/// One version of an app's shared secret, opened (plaintext) for the service's use.
public struct SharedSecretVersion: Sendable, Hashable {
  /// The secret itself. Never log it, never return it over the API.
  public var secret: String
  /// Its fingerprint (``SecretFingerprint/of(_:)``), safe to show.
  public var fingerprint: String
  /// When it was set.
  public var setMs: Int64

  /// Creates a version.
  public init(secret: String, fingerprint: String, setMs: Int64) {
    self.secret = secret
    self.fingerprint = fingerprint
    self.setMs = setMs
  }
}

/// An app's shared secrets: the current one and, during a rotation, the previous one.
public struct SharedSecrets: Sendable, Hashable {
  /// The secret set last.
  public var current: SharedSecretVersion
  /// The one it replaced, if any.
  public var previous: SharedSecretVersion?
  /// Until when (exclusive, ms) ``previous`` is still accepted.
  public var previousValidUntilMs: Int64?

  /// Creates the pair.
  public init(
    current: SharedSecretVersion, previous: SharedSecretVersion?, previousValidUntilMs: Int64?
  ) {
    self.current = current
    self.previous = previous
    self.previousValidUntilMs = previousValidUntilMs
  }

  /// The secrets valid at `ms`: the current one, then the previous one while its overlap lasts.
  public func valid(at ms: Int64) -> [SharedSecretVersion] {
    var out = [current]
    if let previous, let until = previousValidUntilMs, ms < until { out.append(previous) }
    return out
  }
}

/// One entry of the audit log of admin changes.
public struct AuditEntry: Sendable, Hashable, Codable {
  /// Position in the log, assigned by the store (ascending); 0 when appending.
  public var sequence: Int64
  /// The tenant concerned; `nil` for operator actions on no tenant in particular.
  public var tenantId: String?
  /// When it happened.
  public var atMs: Int64
  /// The key id that made the change.
  public var actorKeyId: String
  /// What was done, e.g. `RegisterApp`, `SetSharedSecret`, `RevokeApiKey`.
  public var action: String
  /// The resource changed, e.g. `apps/a1`.
  public var resource: String
  /// Details safe to keep (never secrets).
  public var details: String

  /// Creates an entry.
  public init(
    sequence: Int64 = 0, tenantId: String?, atMs: Int64, actorKeyId: String, action: String,
    resource: String, details: String = ""
  ) {
    self.sequence = sequence
    self.tenantId = tenantId
    self.atMs = atMs
    self.actorKeyId = actorKeyId
    self.action = action
    self.resource = resource
    self.details = details
  }
}

/// Which part of a list to read: at most `size` items after `cursor`.
public struct PageRequest: Sendable, Hashable {
  /// The most items to return (clamped to 1...1000).
  public var size: Int
  /// Where to continue: the previous page's ``Page/nextCursor``; `nil` for the first page.
  public var cursor: String?

  /// Creates a page request.
  public init(size: Int = 100, cursor: String? = nil) {
    self.size = size
    self.cursor = cursor
  }

  /// ``size`` clamped to 1...1000.
  public var limit: Int { min(max(size, 1), 1000) }
}

/// One page of a list and where the next one starts.
public struct Page<Item: Sendable>: Sendable {
  /// The items, in the list's order.
  public var items: [Item]
  /// An opaque cursor for the next page; `nil` on the last page. The service wraps it into an
  /// AIP-158 `next_page_token`.
  public var nextCursor: String?

  /// Creates a page.
  public init(items: [Item], nextCursor: String?) {
    self.items = items
    self.nextCursor = nextCursor
  }
}

extension Page: Equatable where Item: Equatable {}

/// What may be shown of an app's In-App Purchase key (App Store Connect's issuer id, key id and the
/// public half of the `.p8` key): everything but the private key.
public struct InAppPurchaseKeyInfo: Sendable, Hashable {
  /// The key's id in App Store Connect (for example `2X9R4HXF34`), the JWTs' `kid`.
  public var keyId: String
  /// The App Store Connect team's issuer id (a UUID), the JWTs' `iss`.
  public var issuerId: String
  /// `sha256:` and 16 hex digits of the SHA-256 of the public key's DER SubjectPublicKeyInfo.
  public var publicKeyFingerprint: String
  /// The public key as a PEM SubjectPublicKeyInfo.
  public var publicKeyPEM: String
  /// When the key was set.
  public var setMs: Int64

  /// Creates the info.
  public init(
    keyId: String, issuerId: String, publicKeyFingerprint: String, publicKeyPEM: String,
    setMs: Int64
  ) {
    self.keyId = keyId
    self.issuerId = issuerId
    self.publicKeyFingerprint = publicKeyFingerprint
    self.publicKeyPEM = publicKeyPEM
    self.setMs = setMs
  }
}

/// An app's In-App Purchase key with its private key in plaintext: only ever in memory (stores
/// seal ``privateKeyPEM`` at rest). Its descriptions leave the private key out, so interpolating
/// it into a log line cannot leak it.
public struct InAppPurchaseKey: Sendable, Hashable, CustomStringConvertible,
  CustomDebugStringConvertible, CustomReflectable
{
  /// The key's id in App Store Connect, the JWTs' `kid`.
  public var keyId: String
  /// The App Store Connect team's issuer id (a UUID), the JWTs' `iss`.
  public var issuerId: String
  /// The `.p8` file's contents: a PKCS#8 PEM of a P-256 private key. Never log it, never return
  /// it over the API.
  public var privateKeyPEM: String
  /// The public key as a PEM SubjectPublicKeyInfo.
  public var publicKeyPEM: String
  /// `sha256:` and 16 hex digits of the SHA-256 of the public key's DER SubjectPublicKeyInfo.
  public var publicKeyFingerprint: String
  /// When the key was set.
  public var setMs: Int64

  /// Creates a key.
  public init(
    keyId: String, issuerId: String, privateKeyPEM: String, publicKeyPEM: String,
    publicKeyFingerprint: String, setMs: Int64
  ) {
    self.keyId = keyId
    self.issuerId = issuerId
    self.privateKeyPEM = privateKeyPEM
    self.publicKeyPEM = publicKeyPEM
    self.publicKeyFingerprint = publicKeyFingerprint
    self.setMs = setMs
  }

  /// Everything but the private key.
  public var info: InAppPurchaseKeyInfo {
    InAppPurchaseKeyInfo(
      keyId: keyId, issuerId: issuerId, publicKeyFingerprint: publicKeyFingerprint,
      publicKeyPEM: publicKeyPEM, setMs: setMs)
  }

  /// The key id, issuer id and fingerprint; never the private key.
  public var description: String {
    "InAppPurchaseKey(keyId: \(keyId), issuerId: \(issuerId), fingerprint: \(publicKeyFingerprint))"
  }

  /// As ``description``.
  public var debugDescription: String { description }

  /// A mirror without the private key (what `dump` shows).
  public var customMirror: Mirror {
    Mirror(self, children: ["info": info], displayStyle: .struct)
  }
}
