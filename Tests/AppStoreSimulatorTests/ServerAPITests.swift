import AppStoreSignedData
import AppStoreSimulator
import Foundation
import SubscriptionDomain
import SubstatusJSON
import Testing

private let bundle = "com.example.v2"
private let app = "/control/apps/\(bundle)"

/// A simulator with the V2 app, a registered key, and user `p` (production) subscribed monthly
/// since 2026-01-01; returns the key and `p`'s first transaction id.
private func subscribed(_ sim: Sim, environment: String = "production") async throws -> (
  APIKey, String
) {
  try await sim.ok("POST", "/control/apps", catalogV2())
  let key = APIKey()
  try await key.register(sim)
  try await sim.ok("POST", "/control/users", #"{"user_id":"p","environment":"\#(environment)"}"#)
  let bought = try await sim.ok("POST", "\(app)/users/p/purchase", #"{"product_id":"pro.monthly"}"#)
  return (key, try #require(bought["transactions"]?[0]?["transaction_id"]?.string))
}

@Suite("App Store Server API")
struct ServerAPITests {
  @Test func historyPagesByTwentyAndRevisionFetchesOnlyChanges() async throws {
    let sim = try Sim()
    let (key, first) = try await subscribed(sim)
    try await sim.ok("POST", "\(app)/users/p/purchase", #"{"product_id":"lifetime"}"#)
    try await sim.advance(#"{"days":730}"#)  // two years of monthly renewals: 25 subscription transactions
    let root = try await rootCertificate(sim)
    let token = try key.token()

    var (status, page, _) = try await api(
      "GET", sim.base, "/inApps/v2/history/\(first)", token: token)
    #expect(status == 200)
    #expect(page["bundleId"]?.string == bundle)
    #expect(page["appAppleId"] == .integer(6_400_000_001))
    #expect(page["environment"]?.string == "Production")
    #expect(page["hasMore"] == .bool(true))
    var signed = try #require(strings(page["signedTransactions"]))
    #expect(signed.count == 20)
    var seen = try signed.map { try verifiedPayload($0, root: root)["transactionId"]?.string ?? "" }
    let revision1 = try #require(page["revision"]?.string)
    (status, page, _) = try await api(
      "GET", sim.base, "/inApps/v2/history/\(first)?revision=\(revision1)", token: token)
    #expect(status == 200)
    #expect(page["hasMore"] == .bool(false))
    signed = try #require(strings(page["signedTransactions"]))
    #expect(signed.count == 6)
    seen += try signed.map { try verifiedPayload($0, root: root)["transactionId"]?.string ?? "" }
    #expect(Set(seen).count == 26)
    let stored = try #require(page["revision"]?.string)

    // Nothing changed: the stored revision fetches nothing.
    (_, page, _) = try await api(
      "GET", sim.base, "/inApps/v2/history/\(first)?revision=\(stored)", token: token)
    #expect(page["signedTransactions"]?.arrayValue?.isEmpty == true)
    #expect(page["hasMore"] == .bool(false))

    // A refund changes an old transaction and a renewal adds one: exactly those two come, the
    // refunded one again with its revocation.
    try await sim.ok("POST", "\(app)/users/p/refund", #"{"transaction_id":"\#(first)"}"#)
    try await sim.advance(#"{"days":31}"#)
    (_, page, _) = try await api(
      "GET", sim.base, "/inApps/v2/history/\(first)?revision=\(stored)", token: token)
    let changed = try (page["signedTransactions"]?.arrayValue ?? []).map {
      try SubscriptionDomain.Transaction(
        jwsTransactionPayload: try verifiedPayload($0.stringValue ?? "", root: root))
    }
    #expect(changed.count == 2)
    #expect(changed.first?.transactionId == first)
    #expect(changed.first?.revocationDate != nil)
    #expect(changed.last?.transactionId != first)

    // Filters and descending order (by modification: the newest change first).
    (_, page, _) = try await api(
      "GET", sim.base, "/inApps/v2/history/\(first)?productType=NON_CONSUMABLE", token: token)
    #expect(page["signedTransactions"]?.arrayValue?.count == 1)
    (_, page, _) = try await api(
      "GET", sim.base, "/inApps/v2/history/\(first)?revoked=true", token: token)
    #expect(page["signedTransactions"]?.arrayValue?.count == 1)
    (_, page, _) = try await api(
      "GET", sim.base,
      "/inApps/v2/history/\(first)?productId=pro.monthly&productId=lifetime&sort=DESCENDING",
      token: token)
    let newest = try verifiedPayload(page["signedTransactions"]?[0]?.string ?? "", root: root)
    #expect(newest["transactionId"] == changed.last.map { .string($0.transactionId) })
    (_, page, _) = try await api(
      "GET", sim.base,
      "/inApps/v2/history/\(first)?startDate=\(startMs + 1)&endDate=\(startMs + 40 * dayMs)",
      token: token)
    #expect(page["signedTransactions"]?.arrayValue?.count == 1)  // the renewal of 2026-02-01
    await sim.stop()
  }

  @Test func statusesTransactionInfoAndEnvironments() async throws {
    let sim = try Sim()
    let (key, first) = try await subscribed(sim)
    try await sim.ok("POST", "/control/users", #"{"user_id":"s","environment":"sandbox"}"#)
    let sandboxBuy = try await sim.ok(
      "POST", "\(app)/users/s/purchase", #"{"product_id":"pro.yearly"}"#)
    let sandboxID = try #require(sandboxBuy["transactions"]?[0]?["transaction_id"]?.string)
    let root = try await rootCertificate(sim)
    let token = try key.token()

    var (status, body, _) = try await api(
      "GET", sim.base, "/inApps/v1/subscriptions/\(first)", token: token)
    #expect(status == 200)
    #expect(body["environment"]?.string == "Production")
    #expect(body["bundleId"]?.string == bundle)
    let group = try #require(body["data"]?[0])
    #expect(group["subscriptionGroupIdentifier"]?.string == "pro")
    let last = try #require(group["lastTransactions"]?[0])
    #expect(last["status"] == .integer(1))
    #expect(last["originalTransactionId"]?.string == first)
    let renewal = try RenewalInfo(
      jwsRenewalInfoPayload: try verifiedPayload(
        last["signedRenewalInfo"]?.string ?? "", root: root))
    #expect(renewal.willAutoRenew)
    _ = try SubscriptionDomain.Transaction(
      jwsTransactionPayload: try verifiedPayload(
        last["signedTransactionInfo"]?.string ?? "", root: root))
    (_, body, _) = try await api(
      "GET", sim.base, "/inApps/v1/subscriptions/\(first)?status=2&status=5", token: token)
    #expect(body["data"]?.arrayValue?.isEmpty == true)

    // Billing retry with grace: status 4, then 3 once grace ends.
    try await sim.ok("PATCH", app, #"{"grace_period_days":16}"#)
    try await sim.ok("POST", "/control/users/p/billing-failure")
    try await sim.ok("POST", "/control/clock/set", #"{"now_ms":\#(startMs + 31 * dayMs)}"#)
    (_, body, _) = try await api("GET", sim.base, "/inApps/v1/subscriptions/\(first)", token: token)
    #expect(body["data"]?[0]?["lastTransactions"]?[0]?["status"] == .integer(4))
    try await sim.advance(#"{"days":17}"#)
    (_, body, _) = try await api("GET", sim.base, "/inApps/v1/subscriptions/\(first)", token: token)
    #expect(body["data"]?[0]?["lastTransactions"]?[0]?["status"] == .integer(3))

    (status, body, _) = try await api(
      "GET", sim.base, "/inApps/v1/transactions/\(first)", token: token)
    #expect(status == 200)
    let info = try verifiedPayload(body["signedTransactionInfo"]?.string ?? "", root: root)
    #expect(info["transactionId"]?.string == first)

    // A sandbox transaction is unknown to production (the client then asks the sandbox).
    (status, body, _) = try await api(
      "GET", sim.base, "/inApps/v1/transactions/\(sandboxID)", token: token)
    #expect(status == 404)
    #expect(body["errorCode"] == .integer(4_040_010))
    #expect(body["errorMessage"]?.string?.isEmpty == false)
    (status, body, _) = try await api(
      "GET", sim.base, "/sandbox/inApps/v1/transactions/\(sandboxID)", token: token)
    #expect(status == 200)
    (status, body, _) = try await api(
      "GET", sim.base, "/sandbox/inApps/v2/history/\(sandboxID)", token: token)
    #expect(status == 200)
    #expect(body["environment"]?.string == "Sandbox")

    for path in [
      "/inApps/v1/transactions/abc", "/inApps/v2/history/12x", "/inApps/v1/subscriptions/-1",
    ] {
      (status, body, _) = try await api("GET", sim.base, path, token: token)
      #expect(status == 400, "\(path)")
      #expect(body["errorCode"] == .integer(4_000_006), "\(path)")
    }
    (status, body, _) = try await api("GET", sim.base, "/inApps/v2/history/999", token: token)
    #expect(status == 404)
    #expect(body["errorCode"] == .integer(4_040_010))
    for (query, code) in [
      ("sort=UP", 4_000_021), ("revision=garbage", 4_000_005), ("productType=GAME", 4_000_022),
      ("inAppOwnershipType=BORROWED", 4_000_026), ("revoked=maybe", 4_000_030),
      ("startDate=x", 4_000_015),
      ("startDate=10&endDate=5", 4_000_013),
    ] as [(String, Int64)] {
      (status, body, _) = try await api(
        "GET", sim.base, "/inApps/v2/history/\(first)?\(query)", token: token)
      #expect(status == 400, "\(query)")
      #expect(body["errorCode"] == .integer(code), "\(query)")
    }
    (status, body, _) = try await api(
      "GET", sim.base, "/inApps/v1/subscriptions/\(first)?status=9", token: token)
    #expect(body["errorCode"] == .integer(4_000_031))
    await sim.stop()
  }

  @Test func rejectsBadTokensWith401AndNoBody() async throws {
    let sim = try Sim()
    let (key, first) = try await subscribed(sim)
    let now = Int64(Date().timeIntervalSince1970)
    let path = "/inApps/v1/transactions/\(first)"
    let bad: [(String, String?)] = [
      ("no token", nil),
      ("not a JWT", "abc.def"),
      ("wrong audience", try key.token(aud: "appstoreconnect-v2")),
      ("other bundle", try key.token(bid: "com.example.app")),
      ("other issuer", try key.token(iss: "00000000-0000-0000-0000-000000000000")),
      ("unknown key id", try key.token(kid: "ZZZZZZZZZZ")),
      ("expired", try key.token(iat: now - 1200, exp: now - 600)),
      ("lives longer than an hour", try key.token(iat: now, exp: now + 7200)),
      ("issued in the future", try key.token(iat: now + 600, exp: now + 900)),
      ("no iat, expired", try key.token(exp: now - 1, withoutIat: true)),
      ("no iat, exp more than an hour ahead", try key.token(exp: now + 3600 + 120, withoutIat: true)),
      ("signed by another key", try key.token(signingKey: ES256PrivateKey.generate())),
    ]
    for (name, token) in bad {
      let (status, _, raw) = try await api("GET", sim.base, path, token: token)
      #expect(status == 401, "\(name)")
      #expect(raw.isEmpty, "\(name)")
    }
    #expect(try await api("GET", sim.base, path, token: try key.token()).status == 200)
    // Apple's App Store Server Libraries send no `iat`: accepted while `exp` is within the hour.
    #expect(try await api("GET", sim.base, path, token: try key.token(withoutIat: true)).status == 200)
    #expect(
      try await api("GET", sim.base, path, token: try key.token(exp: now + 3600, withoutIat: true))
        .status == 200)
    // The token AppStoreSignedData makes for the service is accepted.
    let made = try AppStoreServerAPIToken.make(
      key: key.key, keyId: key.keyID, issuerId: key.issuer, bundleId: bundle, issuedAt: now * 1000)
    #expect(try await api("GET", sim.base, path, token: made).status == 200)
    // Removing the key revokes access.
    try await sim.ok("DELETE", "\(app)/api-keys/\(key.keyID)")
    #expect(try await api("GET", sim.base, path, token: try key.token()).status == 401)
    await sim.stop()
  }

  @Test func injectedRateLimitAndServerErrors() async throws {
    let sim = try Sim()
    let (key, first) = try await subscribed(sim)
    let token = try key.token()
    try await sim.ok("POST", "/control/server-api/faults", #"{"http_status":429,"count":2}"#)
    try await sim.ok(
      "POST", "/control/server-api/faults", #"{"http_status":500,"error_code":5000001,"count":1}"#)
    for _ in 0..<2 {
      let (status, body, _) = try await api(
        "GET", sim.base, "/inApps/v2/history/\(first)", token: token)
      #expect(status == 429)
      #expect(body["errorCode"] == .integer(4_290_000))
    }
    let (status, body, _) = try await api(
      "GET", sim.base, "/inApps/v2/history/\(first)", token: token)
    #expect(status == 500)
    #expect(body["errorCode"] == .integer(5_000_001))
    #expect(
      try await api("GET", sim.base, "/inApps/v2/history/\(first)", token: token).status == 200)
    // Sandbox-only faults leave production alone.
    try await sim.ok(
      "POST", "/control/server-api/faults", #"{"http_status":503,"environment":"sandbox"}"#)
    #expect(
      try await api("GET", sim.base, "/inApps/v2/history/\(first)", token: token).status == 200)
    #expect(
      try await api("GET", sim.base, "/sandbox/inApps/v2/history/\(first)", token: token).status
        == 503)
    #expect(try await sim.ok("GET", "/control/server-api/faults")["faults"]?.arrayValue?.count == 1)
    try await sim.ok("DELETE", "/control/server-api/faults")
    try await sim.fails(400, "POST", "/control/server-api/faults", #"{"http_status":200}"#)
    try await sim.fails(400, "POST", "/control/server-api/faults", #"{}"#)
    try await sim.fails(
      400, "POST", "\(app)/api-keys", #"{"issuer_id":"i","key_id":"k","public_key_pem":"nope"}"#)
    try await sim.fails(
      404, "POST", "/control/apps/none/api-keys",
      #"{"issuer_id":"i","key_id":"k","public_key_pem":"\#(key.key.publicKey.pem.replacingOccurrences(of: "\n", with: "\\n"))"}"#
    )
    await sim.stop()
  }
}
