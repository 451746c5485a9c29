import AppStoreSignedData
import Foundation
import RPCCore
import SubscriptionStorage
import SubstatusWire
import Testing

@testable import SubstatusService

/// The issuer id App Store Connect shows in Apple's examples.
let testIssuerID = "57246542-96fe-1a63-e053-0824d011072a"

extension Harness {
  /// Sets the app's In-App Purchase key from the fixture `iap-key-p256.p8`; returns the response.
  @discardableResult
  func setInAppPurchaseKey(
    _ app: String, key admin: String, pem: String? = nil, keyID: String = "2X9R4HXF34",
    issuerID: String = testIssuerID
  ) async throws -> Substatus_V1_SetInAppPurchaseKeyResponse {
    var request = Substatus_V1_SetInAppPurchaseKeyRequest()
    request.appID = app
    request.issuerID = issuerID
    request.keyID = keyID
    request.privateKeyPem = try pem ?? fixture("iap-key-p256.p8")
    return try await call(Substatus_V1_AdminService.setInAppPurchaseKey, request, key: admin)
  }
}

/// The field named by an INVALID_ARGUMENT's BadRequest.
func violatedField(_ error: RPCError?) throws -> String? {
  guard let details = error?.metadata.firstBinary(forKey: "grpc-status-details-bin") else { return nil }
  let status = try Google_Rpc_Status(serializedBytes: details)
  return try status.details.lazy.compactMap { try $0.unpack(Google_Rpc_BadRequest.self) }.first?
    .fieldViolations.first?.field
}

@Suite("AdminService.SetInAppPurchaseKey")
struct InAppPurchaseKeyTests {
  @Test("the key is stored; the app shows its key id, issuer, public key and fingerprint, never the private key")
  func setAndShow() async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let pem = try fixture("iap-key-p256.p8")
      let publicKey = try ES256PrivateKey(pkcs8PEM: pem).publicKey
      let fingerprint = "sha256:" + Hex.encode(SHA256.hash(publicKey.spkiDER).prefix(8))
      var get = Substatus_V1_GetAppRequest()
      get.appID = app
      #expect(try await h.call(Substatus_V1_AdminService.getApp, get, key: admin).app?.inAppPurchaseKey == nil)

      h.world.now.withLock { $0 += 5_000 }
      let response = try await h.setInAppPurchaseKey(app, key: admin)
      let info = try #require(response.app?.inAppPurchaseKey)
      #expect(info.keyID == "2X9R4HXF34")
      #expect(info.issuerID == testIssuerID)
      #expect(info.publicKeyFingerprint == fingerprint)
      #expect(info.publicKeyFingerprint.count == "sha256:".count + 16)
      #expect(info.publicKeyPem == publicKey.pem)
      #expect(info.setMs == h.world.now.withLock { $0 })
      #expect(try ES256PublicKey(pem: info.publicKeyPem).spkiDER == publicKey.spkiDER)

      let got = try await h.call(Substatus_V1_AdminService.getApp, get, key: admin).app
      #expect(got?.inAppPurchaseKey == info)
      let listed = try await h.call(Substatus_V1_AdminService.listApps, Substatus_V1_ListAppsRequest(), key: admin)
      #expect(listed.apps.first { $0.appID == app }?.inAppPurchaseKey == info)
      // The stored key opens to the PEM that was sent.
      #expect(try await h.service.store.inAppPurchaseKey(appId: app)?.privateKeyPEM == pem)

      // Setting another key replaces it.
      let other = ES256PrivateKey.generate()
      let replaced = try await h.setInAppPurchaseKey(app, key: admin, pem: other.pkcs8PEM, keyID: "ABCDE12345")
      #expect(replaced.app?.inAppPurchaseKey?.keyID == "ABCDE12345")
      #expect(replaced.app?.inAppPurchaseKey?.publicKeyPem == other.publicKey.pem)
      #expect(try await h.call(Substatus_V1_AdminService.getApp, get, key: admin).app?.inAppPurchaseKey?.keyID == "ABCDE12345")

      // The audit log has the change, without the key.
      let entries = try await h.service.store.auditLog(tenantId: nil, page: PageRequest()).items
        + (try await h.service.store.listTenants(page: PageRequest()).items.asyncFlatMap {
          try await h.service.store.auditLog(tenantId: $0.tenantId, page: PageRequest()).items
        })
      let audit = entries.filter { $0.action == "SetInAppPurchaseKey" }
      #expect(audit.count == 2)
      #expect(audit.first?.details.contains(fingerprint) == true)
      #expect(audit.first?.details.contains("2X9R4HXF34") == true)
      for entry in audit { #expect(!entry.details.contains("PRIVATE KEY")) }
    }
  }

  @Test(
    "bad input is INVALID_ARGUMENT naming the field",
    arguments: [
      ("issuer_id", "", "2X9R4HXF34", "iap-key-p256.p8"),
      ("issuer_id", "not-a-uuid", "2X9R4HXF34", "iap-key-p256.p8"),
      ("issuer_id", "57246542-96fe-1a63-e053-0824d011072", "2X9R4HXF34", "iap-key-p256.p8"),
      ("issuer_id", "57246542x96fe-1a63-e053-0824d011072a", "2X9R4HXF34", "iap-key-p256.p8"),
      ("issuer_id", "57246542-96fe-1a63-e053-0824d011072g", "2X9R4HXF34", "iap-key-p256.p8"),
      ("key_id", testIssuerID, "", "iap-key-p256.p8"),
      ("key_id", testIssuerID, "2x9r4hxf34", "iap-key-p256.p8"),
      ("key_id", testIssuerID, "2X9R4HXF3", "iap-key-p256.p8"),
      ("key_id", testIssuerID, "2X9R4HXF345", "iap-key-p256.p8"),
      ("key_id", testIssuerID, "2X9R4-XF34", "iap-key-p256.p8"),
      ("private_key_pem", testIssuerID, "2X9R4HXF34", ""),
      ("private_key_pem", testIssuerID, "2X9R4HXF34", "iap-key-p384.p8"),
      ("private_key_pem", testIssuerID, "2X9R4HXF34", "iap-key-sec1.pem"),
      ("private_key_pem", testIssuerID, "2X9R4HXF34", "catalog.json"),
    ])
  func invalid(field: String, issuerID: String, keyID: String, pemFixture: String) async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let pem = pemFixture.isEmpty ? "" : try fixture(pemFixture)
      let error = await expectStatus(.invalidArgument) {
        try await h.setInAppPurchaseKey(app, key: admin, pem: pem, keyID: keyID, issuerID: issuerID)
      }
      #expect(try violatedField(error) == field)
      if !pem.isEmpty { #expect(error?.message.contains(String(pem.dropFirst(40).prefix(20))) == false) }
      #expect(try await h.service.store.inAppPurchaseKey(appId: app) == nil)
    }
  }

  @Test("a truncated or corrupted PEM is refused, and the message never quotes it")
  func corruptedPEM() async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let pem = try fixture("iap-key-p256.p8")
      let lines = pem.split(separator: "\n")
      var flipped = Array(lines[1])
      flipped[10] = flipped[10] == "A" ? "B" : "A"
      for bad in [
        lines.dropLast().joined(separator: "\n"),
        ([lines[0]] + lines.dropFirst(2)).joined(separator: "\n"),
        ([lines[0], Substring(String(flipped))] + lines.dropFirst(2)).joined(separator: "\n"),
        pem + pem,
      ] {
        let error = await expectStatus(.invalidArgument) {
          try await h.setInAppPurchaseKey(app, key: admin, pem: bad)
        }
        #expect(try violatedField(error) == "private_key_pem")
        #expect(error?.message.contains(String(lines[1].prefix(16))) == false)
      }
    }
  }

  @Test("unknown app, another tenant's app and non-admin keys are refused")
  func access() async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let (otherAdmin, _) = try await h.makeTenantWithApp(name: "other", bundleID: "com.example.other")
      await expectStatus(.notFound, "unknown app") { try await h.setInAppPurchaseKey("app_nope", key: admin) }
      await expectStatus(.notFound, "other tenant") { try await h.setInAppPurchaseKey(app, key: otherAdmin) }
      var create = Substatus_V1_CreateApiKeyRequest()
      create.role = .read
      let read = try await h.call(Substatus_V1_AdminService.createApiKey, create, key: admin).key
      await expectStatus(.permissionDenied, "read key") { try await h.setInAppPurchaseKey(app, key: read) }
      #expect(try await h.service.store.inAppPurchaseKey(appId: app) == nil)
    }
  }

  @Test("the private key never reaches a log line or an audit entry")
  func neverLogged() async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let pem = try fixture("iap-key-p256.p8")
      try await h.setInAppPurchaseKey(app, key: admin, pem: pem)
      // A refused attempt too (wrong key id), which still carries the PEM.
      await expectStatus(.invalidArgument) {
        try await h.setInAppPurchaseKey(app, key: admin, pem: pem, keyID: "bad")
      }
      var get = Substatus_V1_GetAppRequest()
      get.appID = app
      let shown = try await h.call(Substatus_V1_AdminService.getApp, get, key: admin)
      let body = pem.split(separator: "\n").dropFirst().dropLast().map(String.init)
      let lines = h.world.lines.withLock { $0 }
      #expect(lines.contains { $0.contains("SetInAppPurchaseKey") })
      let tenants = try await h.service.store.listTenants(page: PageRequest()).items
      var audit: [String] = []
      for t in tenants {
        audit += try await h.service.store.auditLog(tenantId: t.tenantId, page: PageRequest()).items.map(\.details)
      }
      let shownJSON = shown.jsonValue().serialized()
      for line in body where line.count >= 16 {
        #expect(!lines.contains { $0.contains(line) }, "a log line holds the private key")
        #expect(!audit.contains { $0.contains(line) }, "an audit entry holds the private key")
        #expect(!shownJSON.contains(line), "GetApp shows the private key")
      }
      // Interpolating the record shows no secret either.
      let record = try #require(try await h.service.store.inAppPurchaseKey(appId: app))
      for text in ["\(record)", String(reflecting: record)] {
        #expect(!body.contains { text.contains($0) })
      }
      var dumped = ""
      dump(record, to: &dumped)
      #expect(!body.contains { dumped.contains($0) })
    }
  }
}

extension Array {
  fileprivate func asyncFlatMap<T>(_ transform: (Element) async throws -> [T]) async rethrows -> [T] {
    var out: [T] = []
    for element in self { out += try await transform(element) }
    return out
  }
}
