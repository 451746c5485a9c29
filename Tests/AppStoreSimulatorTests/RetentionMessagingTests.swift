import AppStoreSignedData
import AppStoreSimulator
import Foundation
import HTTPServer
import SubstatusJSON
import Synchronization
import Testing

/// A developer's "Get Retention Message" endpoint for tests: records every request body and
/// answers the scripted status and body; while `hold` is set it keeps the answer back until
/// `release()` (or 10 s), to play a late server.
final class RetentionEndpoint: Sendable {
  struct State {
    var bodies: [JSONValue] = []
    var status = 200
    var answer: [UInt8] = []
    var hold = false
  }
  final class Box: Sendable {
    let state = Mutex(State())
  }
  let box: Box
  let server: HTTPServer

  init() throws {
    let box = Box()
    self.box = box
    server = try HTTPServer(configuration: .init(host: "127.0.0.1", port: 0)) { request in
      let (status, answer, hold) = box.state.withLock { state in
        state.bodies.append((try? JSONValue(parsing: request.body)) ?? .null)
        return (state.status, state.answer, state.hold)
      }
      if hold {
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(10)
        while box.state.withLock({ $0.hold }) && clock.now < deadline {
          try? await Task.sleep(for: .milliseconds(5))
        }
      }
      return .json(answer, status: status)
    }
  }

  var url: String { "http://\(server.address)/v1/apps/app1/apple/retention" }
  var bodies: [JSONValue] { box.state.withLock { $0.bodies } }
  func answer(_ body: String, status: Int = 200) {
    box.state.withLock {
      $0.answer = Array(body.utf8)
      $0.status = status
    }
  }
  func holdAnswers() { box.state.withLock { $0.hold = true } }
  func release() { box.state.withLock { $0.hold = false } }
  func stop() async {
    release()
    await server.stop(gracePeriod: .milliseconds(200))
  }
}

/// The decoded payload of a compact JWS (not verified: the Apple-library test verifies the chain).
func jwsPayload(_ jws: String) throws -> JSONValue {
  try JSONValue(parsing: try JWS.CompactJWS(parsing: jws).payload)
}

let messageID = "1d2b3c4d-0000-4000-8000-00000000000a"

/// A promotional offer V2 signature as Apple's `PromotionalOfferV2SignatureCreator` makes it;
/// each argument overrides one part.
func offerSignature(
  _ key: APIKey, productID: String = "pro.monthly", offerID: String = "comeback",
  transactionID: String? = nil, aud: String = "promotional-offer", bid: String? = nil,
  kid: String? = nil, signingKey: ES256PrivateKey? = nil
) throws -> String {
  let header: JSONValue = .object(["alg": .string("ES256"), "kid": .string(kid ?? key.keyID), "typ": .string("JWT")])
  var claims: JSONObject = [
    "productId": .string(productID), "offerIdentifier": .string(offerID), "bid": .string(bid ?? key.bundle),
    "iss": .string(key.issuer), "aud": .string(aud), "iat": .integer(Int64(Date().timeIntervalSince1970)),
    "nonce": .string(UUID().uuidString.lowercased()),
  ]
  if let transactionID { claims["transactionId"] = .string(transactionID) }
  return try JWS.sign(header: header, claims: .object(claims), key: signingKey ?? key.key)
}

@Suite("Retention Messaging: the App Store's realtime request and performance test")
struct RetentionMessagingTests {
  /// A V2 app with a retention URL, an In-App Purchase key, and `user` subscribed to pro.monthly.
  func setUp(environment: String = "production") async throws -> (
    sim: Sim, endpoint: RetentionEndpoint, key: APIKey, original: String
  ) {
    let endpoint = try RetentionEndpoint()
    let sim = try Sim()
    try await sim.ok("POST", "/control/apps", catalogV2())
    try await sim.ok("PATCH", "/control/apps/com.example.v2", #"{"retention_url":"\#(endpoint.url)"}"#)
    let key = APIKey()
    try await key.register(sim)
    try await sim.ok("POST", "/control/users", #"{"user_id":"u","environment":"\#(environment)"}"#)
    let bought = try await sim.ok(
      "POST", "/control/apps/com.example.v2/users/u/purchase", #"{"product_id":"pro.monthly"}"#)
    let original = try #require(bought["transactions"]?[0]?["original_transaction_id"]?.string)
    return (sim, endpoint, key, original)
  }

  func ask(_ sim: Sim, _ body: String = #"{"group_id":"pro"}"#) async throws -> JSONValue {
    try await sim.ok("POST", "/control/apps/com.example.v2/users/u/retention-request", body)
  }

  @Test func sendsApplesSignedRealtimeRequestAndRecordsTheAnswer() async throws {
    let (sim, endpoint, _, original) = try await setUp()
    defer { Task { await endpoint.stop(); await sim.stop() } }
    endpoint.answer(#"{"message":{"messageIdentifier":"\#(messageID)"}}"#)
    let result = try await ask(sim, #"{"group_id":"pro","user_locale":"fr-FR"}"#)
    #expect(result["valid"] == .bool(true), "\(result.serialized())")
    #expect(result["shown"]?.string == "message")
    #expect(result["http_status"] == .integer(200))
    #expect((result["latency_ms"]?.doubleValue ?? -1) >= 0)
    #expect(result["answer"]?["message"]?["messageIdentifier"]?.string == messageID)

    // What arrived is Apple's body: {"signedPayload": JWS} and nothing else.
    let body = try #require(endpoint.bodies.first?.objectValue)
    #expect(body.keys == ["signedPayload"])
    let payload = try jwsPayload(try #require(body["signedPayload"]?.stringValue))
    #expect(payload.objectValue?.keys.sorted() == [
      "appAppleId", "environment", "originalTransactionId", "productId", "requestIdentifier",
      "signedDate", "userLocale",
    ])
    #expect(payload["originalTransactionId"]?.string == original)
    #expect(payload["appAppleId"] == .integer(6_400_000_001))
    #expect(payload["productId"]?.string == "pro.monthly")
    #expect(payload["userLocale"]?.string == "fr-FR")
    #expect(payload["environment"]?.string == "Production")
    #expect(payload["signedDate"] == .integer(sim.simulator.nowMs))
    #expect(UUID(uuidString: payload["requestIdentifier"]?.string ?? "") != nil)
    #expect(result["request_identifier"] == payload["requestIdentifier"])

    // Another request gets another identifier; both are listed.
    _ = try await ask(sim, #"{"original_transaction_id":"\#(original)"}"#)
    let listed = try await sim.ok("GET", "/control/retention-requests?bundle_id=com.example.v2")
    let requests = try #require(listed["requests"]?.arrayValue)
    #expect(requests.count == 2)
    #expect(requests[0]["request_identifier"] != requests[1]["request_identifier"])
  }

  /// Each answer, and whether Apple shows it (else the default message).
  static let answers: [(name: String, body: String, status: Int, shown: String)] = [
    ("message", #"{"message":{"messageIdentifier":"\#(messageID)"}}"#, 200, "message"),
    (
      "alternate product",
      #"{"alternateProduct":{"messageIdentifier":"\#(messageID)","productId":"pro.yearly"}}"#, 200,
      "alternate_product"
    ),
    (
      "alternate product is the current one",
      #"{"alternateProduct":{"messageIdentifier":"\#(messageID)","productId":"pro.monthly"}}"#, 200, "default"
    ),
    (
      "alternate product of no group",
      #"{"alternateProduct":{"messageIdentifier":"\#(messageID)","productId":"lifetime"}}"#, 200, "default"
    ),
    ("message id not a UUID", #"{"message":{"messageIdentifier":"hello"}}"#, 200, "default"),
    ("no message id", #"{"message":{}}"#, 200, "default"),
    (
      "two options",
      #"{"message":{"messageIdentifier":"\#(messageID)"},"alternateProduct":{"messageIdentifier":"\#(messageID)","productId":"pro.yearly"}}"#,
      200, "default"
    ),
    ("nothing", "{}", 200, "default"),
    ("not JSON", "<html>", 200, "default"),
    ("server error", #"{"message":{"messageIdentifier":"\#(messageID)"}}"#, 500, "default"),
    ("offer without a signature", #"{"promotionalOffer":{"messageIdentifier":"\#(messageID)"}}"#, 200, "default"),
  ]

  @Test(arguments: answers.indices)
  func judgesTheAnswerAsApple(index: Int) async throws {
    let answer = Self.answers[index]
    let (sim, endpoint, _, _) = try await setUp()
    defer { Task { await endpoint.stop(); await sim.stop() } }
    endpoint.answer(answer.body, status: answer.status)
    let result = try await ask(sim)
    #expect(result["shown"]?.string == answer.shown, "\(answer.name): \(result.serialized())")
    #expect(result["valid"] == .bool(answer.shown != "default"), "\(answer.name)")
    #expect((result["problems"]?.arrayValue?.isEmpty ?? false) == (answer.shown != "default"), "\(answer.name)")
  }

  /// Promotional offer signatures: Apple's claims with the app's In-App Purchase key, and each way
  /// one can be wrong.
  static let signatures: [(name: String, valid: Bool)] = [
    ("valid", true), ("valid with the customer's transaction", true), ("another key signed", false),
    ("unknown kid", false), ("wrong audience", false), ("another app", false),
    ("another product", false), ("unknown offer", false), ("a stranger's transaction", false),
    ("not a JWS", false),
  ]

  @Test(arguments: signatures.indices)
  func checksThePromotionalOfferSignature(index: Int) async throws {
    let (name, valid) = Self.signatures[index]
    let (sim, endpoint, key, original) = try await setUp()
    defer { Task { await endpoint.stop(); await sim.stop() } }
    let signature: String
    switch name {
    case "valid": signature = try offerSignature(key)
    case "valid with the customer's transaction": signature = try offerSignature(key, transactionID: original)
    case "another key signed": signature = try offerSignature(key, signingKey: ES256PrivateKey.generate())
    case "unknown kid": signature = try offerSignature(key, kid: "ZZZZZZZZZZ")
    case "wrong audience": signature = try offerSignature(key, aud: "appstoreconnect-v1")
    case "another app": signature = try offerSignature(key, bid: "com.example.other")
    case "another product": signature = try offerSignature(key, productID: "pro.yearly")
    case "unknown offer": signature = try offerSignature(key, offerID: "nope")
    case "a stranger's transaction": signature = try offerSignature(key, transactionID: "1")
    default: signature = "not-a-jws"
    }
    endpoint.answer(
      #"{"promotionalOffer":{"messageIdentifier":"\#(messageID)","promotionalOfferSignatureV2":"\#(signature)"}}"#)
    let result = try await ask(sim)
    #expect(result["valid"] == .bool(valid), "\(name): \(result.serialized())")
    #expect(result["shown"]?.string == (valid ? "promotional_offer" : "default"), "\(name)")
  }

  @Test func aLateAnswerShowsTheDefault() async throws {
    let (sim, endpoint, _, _) = try await setUp()
    defer { Task { await endpoint.stop(); await sim.stop() } }
    endpoint.answer(#"{"message":{"messageIdentifier":"\#(messageID)"}}"#)
    endpoint.holdAnswers()
    let result = try await ask(sim, #"{"group_id":"pro","response_time_threshold_ms":100}"#)
    endpoint.release()
    #expect(result["valid"] == .bool(false))
    #expect(result["shown"]?.string == "default")
    #expect(result["failure"]?.string == "TIMED_OUT")
    #expect(result["http_status"] == .null)
  }

  @Test func refusesWithoutARetentionURLOrSubscription() async throws {
    let (sim, endpoint, _, _) = try await setUp()
    defer { Task { await endpoint.stop(); await sim.stop() } }
    try await sim.fails(404, "POST", "/control/apps/com.example.v2/users/u/retention-request", #"{"group_id":"lite"}"#)
    try await sim.fails(400, "POST", "/control/apps/com.example.v2/users/u/retention-request", "{}")
    try await sim.ok("PATCH", "/control/apps/com.example.v2", #"{"retention_url":null}"#)
    try await sim.fails(409, "POST", "/control/apps/com.example.v2/users/u/retention-request", #"{"group_id":"pro"}"#)
    try await sim.fails(400, "PATCH", "/control/apps/com.example.v2", #"{"retention_url":"ftp://x"}"#)
    #expect(endpoint.bodies.isEmpty)
  }

  @Test func performanceTestReportsApplesFigures() async throws {
    let (sim, endpoint, _, original) = try await setUp(environment: "sandbox")
    defer { Task { await endpoint.stop(); await sim.stop() } }
    endpoint.answer(#"{"message":{"messageIdentifier":"\#(messageID)"}}"#)
    let result = try await sim.ok(
      "POST", "/control/apps/com.example.v2/retention-performance-test",
      #"{"original_transaction_id":"\#(original)","total_requests":40,"max_concurrent_requests":8}"#)
    #expect(result["result"]?.string == "PASS", "\(result.serialized())")
    #expect(result["successRate"] == .integer(100))
    #expect(result["numPending"] == .integer(0))
    #expect(result["failures"]?.objectValue?.isEmpty == true)
    #expect(result["config"]?["totalRequests"] == .integer(40))
    #expect(result["config"]?["maxConcurrentRequests"] == .integer(8))
    #expect(result["config"]?["responseTimeThreshold"] == .integer(700))
    #expect(result["target"]?.string == endpoint.url)
    let times = try #require(result["responseTimes"])
    let p50 = try #require(times["p50"]?.doubleValue)
    let p99 = try #require(times["p99"]?.doubleValue)
    #expect(p50 > 0 && p50 <= p99)
    #expect(endpoint.bodies.count == 40)
    // Every request is freshly signed with its own identifier.
    let identifiers = Set(try endpoint.bodies.map {
      try jwsPayload($0["signedPayload"]?.string ?? "")["requestIdentifier"]?.string ?? ""
    })
    #expect(identifiers.count == 40)
    // The result can be read again by its request id (Get Performance Test Results).
    let id = try #require(result["requestId"]?.string)
    #expect(try await sim.ok("GET", "/control/retention-performance-tests/\(id)") == result)
  }

  @Test func performanceTestFailsOnInvalidAnswersAndRunsOnlyInTheSandbox() async throws {
    let (sim, endpoint, _, original) = try await setUp(environment: "sandbox")
    defer { Task { await endpoint.stop(); await sim.stop() } }
    endpoint.answer(#"{"message":{"messageIdentifier":"not-a-uuid"}}"#)
    let result = try await sim.ok(
      "POST", "/control/apps/com.example.v2/retention-performance-test",
      #"{"original_transaction_id":"\#(original)","total_requests":10,"max_concurrent_requests":4}"#)
    #expect(result["result"]?.string == "FAIL")
    #expect(result["successRate"] == .integer(0))
    #expect(result["failures"]?["INVALID_RESPONSE"] == .integer(10))

    try await sim.ok("POST", "/control/users", #"{"user_id":"p","environment":"production"}"#)
    let bought = try await sim.ok(
      "POST", "/control/apps/com.example.v2/users/p/purchase", #"{"product_id":"pro.monthly"}"#)
    let production = try #require(bought["transactions"]?[0]?["original_transaction_id"]?.string)
    try await sim.fails(
      409, "POST", "/control/apps/com.example.v2/retention-performance-test",
      #"{"original_transaction_id":"\#(production)"}"#)
    try await sim.fails(
      400, "POST", "/control/apps/com.example.v2/retention-performance-test",
      #"{"original_transaction_id":"\#(original)","max_concurrent_requests":1000}"#)
  }
}
