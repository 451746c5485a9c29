import SubstatusClientTestKit
import Foundation
import RPCCore
import SubstatusClient
import SubstatusWire
import Testing

private func message<M: ProtobufMessage>(_ type: M.Type = M.self, _ build: (inout M) -> Void) -> M {
  var value = M()
  build(&value)
  return value
}

/// The client methods of issue #9 (signed data).
let signedDataMethodCases: [MethodCase] = [
  .make(
    "setInAppPurchaseKey", Substatus_V1_AdminService.setInAppPurchaseKey,
    expect: message {
      $0.appID = "app_1"
      $0.issuerID = "57246542-96fe-1a63-e053-0824d011072a"
      $0.keyID = "2X9R4HXF34"
      $0.privateKeyPem = "-----BEGIN PRIVATE KEY-----\n...\n-----END PRIVATE KEY-----\n"
    },
    reply: message(Substatus_V1_SetInAppPurchaseKeyResponse.self) {
      $0.app = message {
        $0.appID = "app_1"
        $0.inAppPurchaseKey = message { $0.keyID = "2X9R4HXF34" }
      }
    }
  ) { client, reply async throws in
    #expect(
      try await client.setInAppPurchaseKey(
        appID: "app_1", issuerID: "57246542-96fe-1a63-e053-0824d011072a", keyID: "2X9R4HXF34",
        privateKeyPEM: "-----BEGIN PRIVATE KEY-----\n...\n-----END PRIVATE KEY-----\n") == reply.app)
  },
  .make(
    "signPromotionalOffer", Substatus_V1_EligibilityService.signPromotionalOffer,
    expect: message {
      $0.appID = "app_1"
      $0.userID = "user-42"
      $0.productID = "pro.monthly"
      $0.offerID = "pro.retain"
      $0.appAccountToken = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
      $0.nonce = "0f0e0d0c-0b0a-4908-8706-050403020100"
      $0.transactionID = "2000"
      $0.environment = .sandbox
    },
    reply: message(Substatus_V1_SignPromotionalOfferResponse.self) {
      $0.signature = "MEUCIQ=="
      $0.compactJws = "a.b.c"
    }
  ) { client, reply async throws in
    #expect(
      try await client.signPromotionalOffer(
        appID: "app_1", userID: "user-42", productID: "pro.monthly", offerID: "pro.retain",
        appAccountToken: "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
        nonce: "0f0e0d0c-0b0a-4908-8706-050403020100", transactionID: "2000", environment: .sandbox)
        == reply)
  },
  .make(
    "signIntroductoryOfferEligibility", Substatus_V1_EligibilityService.signIntroductoryOfferEligibility,
    expect: message {
      $0.appID = "app_1"
      $0.userID = "user-42"
      $0.productID = "pro.monthly"
      $0.transactionID = "2000"
      $0.nonce = "0f0e0d0c-0b0a-4908-8706-050403020100"
    },
    reply: message(Substatus_V1_SignIntroductoryOfferEligibilityResponse.self) { $0.compactJws = "a.b.c" }
  ) { client, reply async throws in
    #expect(
      try await client.signIntroductoryOfferEligibility(
        appID: "app_1", userID: "user-42", productID: "pro.monthly", transactionID: "2000",
        nonce: "0f0e0d0c-0b0a-4908-8706-050403020100") == reply)
  },
]

@Suite("SubstatusClient: In-App Purchase key and offer signatures")
struct SignedDataMethodTests {
  @Test("each method calls its path with its request and the bearer key", arguments: signedDataMethodCases)
  func method(_ testCase: MethodCase) async throws {
    let log = CallLog()
    var router = RPCRouter()
    testCase.register(&router, log)
    try await withFakeServer(router) { transport in
      try await testCase.invoke(SubstatusClient(transport: transport, apiKey: "sk_test"))
    }
    let calls = log.all
    try #require(calls.count == 1)
    #expect(calls[0].method == testCase.path)
    #expect(calls[0].authorization == "Bearer sk_test")
    #expect(testCase.requestMatches(calls[0].request))
  }

  @Test("setting the key and signing are retried after UNAVAILABLE, as their RPCs declare (IDEMPOTENT, NO_SIDE_EFFECTS)")
  func retries() async throws {
    let log = CallLog()
    var router = RPCRouter()
    router.fake(Substatus_V1_AdminService.setInAppPurchaseKey, log: log) { _, _ in
      throw RPCError(code: .unavailable, message: "try again")
    }
    // `count` numbers the calls of both methods: the key's four attempts (the policy's maximum),
    // then two failed signings.
    router.fake(Substatus_V1_EligibilityService.signIntroductoryOfferEligibility, log: log) { _, count in
      if count <= 6 { throw RPCError(code: .unavailable, message: "try again (\(count))") }
      return message { $0.compactJws = "a.b.c" }
    }
    let policy = RetryPolicy(
      maximumAttempts: 4, initialBackoff: .milliseconds(1), maximumBackoff: .milliseconds(4),
      multiplier: 2, jitter: 0.5)
    try await withFakeServer(router) { transport in
      let client = SubstatusClient(transport: transport, apiKey: "k", retryPolicy: policy)
      let error = await #expect(throws: RPCError.self) {
        _ = try await client.setInAppPurchaseKey(appID: "a", issuerID: "i", keyID: "k", privateKeyPEM: "p")
      }
      #expect(error?.code == .unavailable)
      #expect(log.count == 4)
      let signed = try await client.signIntroductoryOfferEligibility(appID: "a", userID: "u", productID: "p")
      #expect(signed.compactJws == "a.b.c")
      #expect(log.count == 7)
    }
  }
}
