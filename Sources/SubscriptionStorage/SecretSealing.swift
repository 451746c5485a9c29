import SubscriptionDomain

// What the SQL stores do the same way with sealed values (docs/architecture.md "Security"): each
// value is sealed with AES-256-GCM under the master keyring (``SecretBox``) and bound to its owner
// by a context string, so a box copied to another row does not open. The dialect files keep only
// the SQL that reads and writes the sealed columns; the sealing, opening, re-sealing and their
// errors are here, once (``SharedSecretSealing``, ``InAppPurchaseKeySealing``, and
// ``WebhookFanOut`` for webhook signing secrets).

extension MasterKeyring {
  /// The keyring a store was configured with, or the error every secret operation of a store
  /// without one reports.
  /// - Throws: `secretUnavailable` naming the two ways to configure a master key.
  public static func required(_ configured: MasterKeyring?) throws(StoreError) -> MasterKeyring {
    guard let configured else {
      throw StoreError(
        .secretUnavailable,
        "no master key configured (set \(environmentVariable) or \(fileEnvironmentVariable))")
    }
    return configured
  }
}

/// How every SQL store seals an app's shared secrets at rest (the current one and the previous
/// one, kept for rotation), bound to the app.
public enum SharedSecretSealing {
  /// One stored version of a shared secret as its row holds it: sealed, with its fingerprint and
  /// when it was set.
  public struct StoredVersion: Sendable, Hashable {
    /// The sealed secret.
    public var sealed: SealedSecret
    /// Its fingerprint (``SecretFingerprint/of(_:)``), stored in the clear.
    public var fingerprint: String
    /// When it was set.
    public var setMs: Int64

    /// Creates a stored version.
    public init(sealed: SealedSecret, fingerprint: String, setMs: Int64) {
      self.sealed = sealed
      self.fingerprint = fingerprint
      self.setMs = setMs
    }
  }

  /// The associated data that binds a sealed shared secret to its app.
  public static func context(_ appId: String) -> String { "substatus/shared-secret/" + appId }

  /// Seals a shared secret of `appId`.
  /// - Throws: `secretUnavailable` when it cannot be sealed.
  public static func seal(_ secret: String, appId: String, keyring: MasterKeyring) throws(StoreError) -> SealedSecret {
    do {
      return try SecretBox.seal(Array(secret.utf8), context: context(appId), keyring: keyring)
    } catch {
      throw StoreError(.secretUnavailable, "cannot seal the shared secret: \(error.message)")
    }
  }

  /// An app's stored shared secrets, still sealed: what the read of ``columns`` holds.
  public struct Stored: Sendable, Hashable {
    /// The secret set last.
    public var current: StoredVersion
    /// The one it replaced, if any.
    public var previous: StoredVersion?
    /// Until when the previous one is accepted.
    public var previousValidUntilMs: Int64?
  }

  /// The `shared_secrets` columns, in the order ``stored(_:)`` reads them (both schemas).
  public static let columns = """
    current_key_id, current_box, current_fingerprint, current_set_ms, previous_key_id,
      previous_box, previous_fingerprint, previous_set_ms, previous_valid_until_ms
    """

  /// The stored secrets of a row whose columns are ``columns`` (no previous secret when
  /// `previous_key_id` is NULL).
  public static func stored(_ row: some StoreRow) -> Stored {
    func version(_ at: Int) -> StoredVersion {
      StoredVersion(
        sealed: SealedSecret(keyId: row.text(at), box: row.bytes(at + 1)), fingerprint: row.text(at + 2),
        setMs: row.int(at + 3))
    }
    return Stored(
      current: version(0), previous: row.optionalText(4) == nil ? nil : version(4),
      previousValidUntilMs: row.optionalInt(8))
  }

  /// Opens an app's stored shared secrets.
  /// - Throws: `secretUnavailable` when the keyring cannot open one (wrong master key, another
  ///   app's box).
  public static func open(_ stored: Stored, appId: String, keyring: MasterKeyring) throws(StoreError)
    -> SharedSecrets
  {
    func open(_ version: StoredVersion) throws(StoreError) -> SharedSecretVersion {
      do {
        let plain = try SecretBox.open(version.sealed, context: context(appId), keyring: keyring)
        return SharedSecretVersion(
          secret: String(decoding: plain, as: UTF8.self), fingerprint: version.fingerprint, setMs: version.setMs)
      } catch {
        throw StoreError(.secretUnavailable, "shared secret of app \"\(appId)\": \(error.message)")
      }
    }
    return SharedSecrets(
      current: try open(stored.current), previous: try stored.previous.map(open),
      previousValidUntilMs: stored.previousValidUntilMs)
  }

  /// The secret sealed under the keyring's current master key (itself if it already is).
  /// - Throws: `secretUnavailable` when the keyring cannot open it.
  public static func reseal(_ sealed: SealedSecret, appId: String, keyring: MasterKeyring) throws(StoreError)
    -> SealedSecret
  {
    do {
      return try SecretBox.reseal(sealed, context: context(appId), keyring: keyring)
    } catch {
      throw StoreError(.secretUnavailable, "shared secret of app \"\(appId)\": \(error.message)")
    }
  }
}

extension InAppPurchaseKeySealing {
  /// A stored In-App Purchase key: its public parts and its sealed private key.
  public struct Stored: Sendable, Hashable {
    /// What may be shown of it.
    public var info: InAppPurchaseKeyInfo
    /// The sealed private key.
    public var sealed: SealedSecret
  }

  /// The `in_app_purchase_keys` columns, in the order ``stored(_:)`` reads them (both schemas).
  public static let columns =
    "key_id, issuer_id, public_key_fingerprint, public_key_pem, set_ms, master_key_id, private_key_box"

  /// The stored key of a row whose columns are ``columns``.
  public static func stored(_ row: some StoreRow) -> Stored {
    Stored(
      info: InAppPurchaseKeyInfo(
        keyId: row.text(0), issuerId: row.text(1), publicKeyFingerprint: row.text(2), publicKeyPEM: row.text(3),
        setMs: row.int(4)),
      sealed: SealedSecret(keyId: row.text(5), box: row.bytes(6)))
  }

  /// Opens a stored key (``open(_:info:appId:keyring:)``).
  /// - Throws: `secretUnavailable` when the keyring cannot open it.
  public static func open(_ stored: Stored, appId: String, keyring: MasterKeyring) throws(StoreError)
    -> InAppPurchaseKey
  {
    try open(stored.sealed, info: stored.info, appId: appId, keyring: keyring)
  }

  /// The private key sealed under the keyring's current master key (itself if it already is).
  /// - Throws: `secretUnavailable` when the keyring cannot open it.
  public static func reseal(_ sealed: SealedSecret, appId: String, keyring: MasterKeyring) throws(StoreError)
    -> SealedSecret
  {
    do {
      return try SecretBox.reseal(sealed, context: context(appId), keyring: keyring)
    } catch {
      throw StoreError(.secretUnavailable, "In-App Purchase key of app \"\(appId)\": \(error.message)")
    }
  }
}

extension WebhookFanOut {
  /// A signing secret sealed again under the keyring's current master key.
  /// - Throws: `secretUnavailable` when the keyring cannot open it.
  public static func reseal(_ sealed: SealedSecret, webhookId: String, keyring: MasterKeyring) throws(StoreError)
    -> SealedSecret
  {
    try seal(open(sealed, webhookId: webhookId, keyring: keyring), webhookId: webhookId, keyring: keyring)
  }
}
