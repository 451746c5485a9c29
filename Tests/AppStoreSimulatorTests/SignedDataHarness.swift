import AppStoreSignedData
import AppStoreSimulator
import Foundation
import SubscriptionDomain
import SubstatusJSON
import Testing

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// The V2 test app: priced products, V2 notifications to `notificationURL`.
func catalogV2(
  bundle: String = "com.example.v2", notificationURL: String? = nil, compression: Double = 1,
  graceDays: Int = 0
) -> String {
  let url = notificationURL.map { "\"\($0)\"" } ?? "null"
  return """
    {"bundle_id":"\(bundle)","apple_app_id":6400000001,"shared_secret":"s3cret","notification_version":"v2",
     "grace_period_days":\(graceDays),"notification_url":\(url),"notification_retry_compression":\(compression),
     "products":[
      {"product_id":"pro.monthly","type":"auto_renewable","subscription_group_id":"pro","duration":"P1M",
       "level":2,"family_shareable":true,"price":9.99,"currency":"USD",
       "introductory_offer":{"type":"free_trial","duration":"P1W"},
       "promotional_offers":[{"id":"comeback","type":"pay_as_you_go","periods":2,"price":4.99}],
       "offer_codes":[{"ref_name":"SUMMER","type":"free_trial","duration":"P1M"}]},
      {"product_id":"pro.monthly.b","type":"auto_renewable","subscription_group_id":"pro","duration":"P1M","level":2,
       "price":9.99},
      {"product_id":"pro.quarterly","type":"auto_renewable","subscription_group_id":"pro","duration":"P3M","level":3,
       "price":24.99},
      {"product_id":"pro.yearly","type":"auto_renewable","subscription_group_id":"pro","duration":"P1Y","level":1,
       "family_shareable":true,"price":99.99},
      {"product_id":"lifetime","type":"non_consumable","price":49.99},
      {"product_id":"coins","type":"consumable","price":0.99}
     ]}
    """
}

/// An In-App Purchase key registered with the simulator, signing Server API JWTs.
struct APIKey {
  let key = ES256PrivateKey.generate()
  let issuer = "57246542-96fe-1a63-e053-0824d011072a"
  let keyID = "ABCDEFGHIJ"
  let bundle: String

  init(bundle: String = "com.example.v2") { self.bundle = bundle }

  func register(_ sim: Sim) async throws {
    let body: JSONValue = .object([
      "issuer_id": .string(issuer), "key_id": .string(keyID),
      "public_key_pem": .string(key.publicKey.pem),
    ])
    try await sim.ok("POST", "/control/apps/\(bundle)/api-keys", body.serialized())
  }

  /// A JWT with `iat` (Apple's libraries omit it: `withoutIat`); each argument overrides one
  /// claim.
  func token(
    aud: String = "appstoreconnect-v1", bid: String? = nil, iss: String? = nil, kid: String? = nil,
    iat: Int64? = nil, exp: Int64? = nil, withoutIat: Bool = false,
    signingKey: ES256PrivateKey? = nil
  ) throws -> String {
    let now = Int64(Date().timeIntervalSince1970)
    let header: JSONValue = .object([
      "alg": .string("ES256"), "kid": .string(kid ?? keyID), "typ": .string("JWT"),
    ])
    var claims: JSONObject = [
      "iss": .string(iss ?? issuer), "exp": .integer(exp ?? now + 600),
      "aud": .string(aud), "bid": .string(bid ?? bundle),
    ]
    if !withoutIat { claims["iat"] = .integer(iat ?? now) }
    return try JWS.sign(header: header, claims: .object(claims), key: signingKey ?? key)
  }
}

/// A Server API call; `token` nil sends no Authorization header.
func api(_ method: String, _ base: String, _ path: String, token: String?, body: String? = nil)
  async throws -> (
    status: Int, json: JSONValue, raw: Data
  )
{
  var request = URLRequest(url: URL(string: "http://\(base)\(path)")!)
  request.httpMethod = method
  if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
  if let body {
    request.httpBody = Data(body.utf8)
    request.setValue("application/json", forHTTPHeaderField: "Content-Type")
  }
  let (data, response) = try await session.data(for: request)
  let json = data.isEmpty ? JSONValue.null : (try? JSONValue(parsing: Array(data))) ?? .null
  return ((response as! HTTPURLResponse).statusCode, json, data)
}

/// A verified view of a JWS the simulator signed: the payload, after checking the signature
/// with the leaf of `x5c` and that the chain ends in `root`.
func verifiedPayload(
  _ jws: String, root: X509Certificate, sourceLocation: SourceLocation = #_sourceLocation
)
  throws -> JSONValue
{
  let parsed = try JWS.CompactJWS(parsing: jws)
  #expect(parsed.header["alg"]?.stringValue == "ES256", sourceLocation: sourceLocation)
  let x5c = try #require(strings(parsed.header["x5c"]), sourceLocation: sourceLocation)
  #expect(x5c.count == 3, sourceLocation: sourceLocation)
  let chain = try x5c.map { try X509Certificate(der: Array(try #require(Data(base64Encoded: $0)))) }
  #expect(
    chain.last == root, "the chain must end in the simulator's root", sourceLocation: sourceLocation
  )
  let leafKey = try chain[0].es256PublicKey()
  #expect(
    leafKey.isValidSignature(parsed.signature, for: parsed.signingInput),
    sourceLocation: sourceLocation)
  return try JSONValue(parsing: parsed.payload)
}

/// The simulator's root certificate, fetched from the control API.
func rootCertificate(_ sim: Sim) async throws -> X509Certificate {
  let (status, _) = try await call("GET", sim.base, "/control/root-ca.pem")
  #expect(status == 200)
  var request = URLRequest(url: URL(string: "http://\(sim.base)/control/root-ca.pem")!)
  request.httpMethod = "GET"
  let (data, _) = try await session.data(for: request)
  return try X509Certificate(pem: String(decoding: data, as: UTF8.self))
}

extension RecordingReceiver {
  /// The decoded V2 payloads received (signature checked against `root`).
  func notificationsV2(root: X509Certificate) throws -> [(
    payload: JSONValue, notification: NotificationV2
  )] {
    try bodies.map { body in
      let signed = try #require(body["signedPayload"]?.stringValue)
      let payload = try verifiedPayload(signed, root: root)
      return (payload, try NotificationV2(json: payload))
    }
  }
}

/// The strings of a JSON array (nil when it is not an array of strings).
func strings(_ value: JSONValue?) -> [String]? {
  guard let array = value?.arrayValue else { return nil }
  let strings = array.compactMap(\.stringValue)
  return strings.count == array.count ? strings : nil
}
