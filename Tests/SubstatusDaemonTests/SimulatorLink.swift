import AppStoreSignedData
import Foundation
import SubstatusWire

extension DaemonClient {
  /// Makes `appID` (from ``makeApp(operatorKey:bundleID:appleAppID:)``) and the simulator's app
  /// `bundleID` one app: the simulator posts V2 notifications to substatusd's endpoint and sells
  /// `pro.monthly`; substatusd holds a fresh In-App Purchase key (id `keyID`) whose public half the
  /// simulator's App Store Server API trusts.
  func linkServerAPI(
    of sim: RunningSimulator, daemon: RunningDaemon, admin: String, appID: String, bundleID: String,
    appleAppID: Int64, keyID: String
  ) async throws {
    let key = ES256PrivateKey.generate()
    var setKey = Substatus_V1_SetInAppPurchaseKeyRequest()
    setKey.appID = appID
    setKey.issuerID = "57246542-96fe-1a63-e053-0824d011072a"
    setKey.keyID = keyID
    setKey.privateKeyPem = key.pkcs8PEM
    _ = try await call(Substatus_V1_AdminService.setInAppPurchaseKey, setKey, key: admin)
    _ = try await sim.post(
      "/control/apps",
      [
        "bundle_id": bundleID, "shared_secret": "0123456789abcdef", "apple_app_id": appleAppID,
        "notification_version": "v2",
        "notification_url": "http://\(daemon.http)/v1/apps/\(appID)/apple/notifications",
        "products": [
          ["product_id": "pro.monthly", "type": "auto_renewable", "subscription_group_id": "pro", "duration": "P1M"]
        ],
      ])
    _ = try await sim.post(
      "/control/apps/\(bundleID)/api-keys",
      ["issuer_id": setKey.issuerID, "key_id": setKey.keyID, "public_key_pem": key.publicKey.pem])
  }
}

extension RunningSimulator {
  /// substatusd's flags that make this simulator its App Store Server API (production and
  /// sandbox) and trust the simulator's root certificate, written to `rootCA` by `--root-ca-out`.
  func serverAPIArguments(rootCA: String) -> [String] {
    [
      "--app-store-server-api-production-url", "http://\(address)",
      "--app-store-server-api-sandbox-url", "http://\(address)/sandbox", "--apple-root-ca", rootCA,
    ]
  }
}
