/// How every store seals an app's In-App Purchase private key at rest: AES-256-GCM under the
/// master key, bound to the app (a box copied to another app does not open).
public enum InAppPurchaseKeySealing {
  /// The associated data that binds a sealed key to its app.
  public static func context(_ appId: String) -> String { "substatus/in-app-purchase-key/" + appId }

  /// Seals the key's private PEM for `appId`.
  /// - Throws: `secretUnavailable` when it cannot be sealed.
  public static func seal(_ key: InAppPurchaseKey, appId: String, keyring: MasterKeyring)
    throws(StoreError) -> SealedSecret
  {
    do {
      return try SecretBox.seal(Array(key.privateKeyPEM.utf8), context: context(appId), keyring: keyring)
    } catch {
      throw StoreError(.secretUnavailable, "cannot seal the In-App Purchase key: \(error.message)")
    }
  }

  /// Opens a sealed private key and joins it to the stored public parts.
  /// - Throws: `secretUnavailable` when the keyring cannot open it (wrong master key, another app).
  public static func open(
    _ sealed: SealedSecret, info: InAppPurchaseKeyInfo, appId: String, keyring: MasterKeyring
  ) throws(StoreError) -> InAppPurchaseKey {
    let plain: [UInt8]
    do {
      plain = try SecretBox.open(sealed, context: context(appId), keyring: keyring)
    } catch {
      throw StoreError(.secretUnavailable, "In-App Purchase key of app \"\(appId)\": \(error.message)")
    }
    return InAppPurchaseKey(
      keyId: info.keyId, issuerId: info.issuerId, privateKeyPEM: String(decoding: plain, as: UTF8.self),
      publicKeyPEM: info.publicKeyPEM, publicKeyFingerprint: info.publicKeyFingerprint, setMs: info.setMs)
  }
}
