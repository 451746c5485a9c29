import RPCCore
import SubstatusClient
import SubstatusClientTestKit
import SubstatusServiceAPI
import SubstatusWire
import Synchronization
import Testing

/// A fast policy for tests: 1 ms doubling to 4 ms.
private let quick = RetryPolicy(
  maximumAttempts: 4, initialBackoff: .milliseconds(1), maximumBackoff: .milliseconds(4),
  multiplier: 2, jitter: 0.5)

/// The generated clients that `SubstatusClient.service(_:)` gives carry the client's policy, so an
/// RPC without a typed method needs no client code.
@Suite("SubstatusClient over the generated clients")
struct GeneratedClientTests {
  @Test("a generated unary method gets the key, the metadata and retries of UNAVAILABLE")
  func unaryThroughGeneratedClient() async throws {
    let log = CallLog()
    var router = RPCRouter()
    router.fake(Substatus_V1_AdminService.getApp, log: log) { request, count in
      if count == 1 { throw RPCError(code: .unavailable, message: "try again") }
      var response = Substatus_V1_GetAppResponse()
      response.app = Substatus_V1_App()
      response.app?.appID = request.appID
      return response
    }
    let app = try await withFakeServer(router) { transport in
      var request = Substatus_V1_GetAppRequest()
      request.appID = "app_1"
      return try await SubstatusClient(transport: transport, apiKey: "k", retryPolicy: quick)
        .service(
          Substatus_V1_AdminService.Client.self, idempotency: .idempotent,
          options: SubstatusCallOptions(metadata: ["x-request-id": "r-1"])
        )
        .getApp(request)
    }
    #expect(app.app?.appID == "app_1")
    #expect(log.count == 2)
    #expect(log.all.allSatisfy { $0.authorization == "Bearer k" })
    #expect(log.all.allSatisfy { $0.metadata.firstString(forKey: "x-request-id") == "r-1" })
  }

  @Test("a generated unary method is not retried when its RPC declares no idempotency, or when told")
  func nonIdempotentByDefault() async throws {
    let log = CallLog()
    var router = RPCRouter()
    router.fake(Substatus_V1_AdminService.createApiKey, log: log) { _, _ in
      throw RPCError(code: .unavailable, message: "try again")
    }
    router.fake(Substatus_V1_AdminService.getApp, log: log) { _, _ in
      throw RPCError(code: .unavailable, message: "try again")
    }
    #expect(Substatus_V1_AdminService.createApiKey.idempotencyLevel == .idempotencyUnknown)
    try await withFakeServer(router) { transport in
      let client = SubstatusClient(transport: transport, apiKey: "k", retryPolicy: quick)
      let declared = await #expect(throws: RPCError.self) {
        _ = try await client.service(Substatus_V1_AdminService.Client.self).createApiKey(Substatus_V1_CreateApiKeyRequest())
      }
      #expect(declared?.code == .unavailable)
      #expect(log.count == 1)
      // GetApp declares NO_SIDE_EFFECTS, but the caller says otherwise.
      let told = await #expect(throws: RPCError.self) {
        _ = try await client.service(Substatus_V1_AdminService.Client.self, idempotency: .nonIdempotent)
          .getApp(Substatus_V1_GetAppRequest())
      }
      #expect(told?.code == .unavailable)
      #expect(log.count == 2)
    }
  }

  @Test(
    "by default a generated method is retried as its RPC declares (NO_SIDE_EFFECTS or IDEMPOTENT)",
    arguments: [("GetApp", true), ("RevokeApiKey", true), ("RegisterApp", false), ("SetSharedSecret", false)])
  func retriedAsDeclared(method: String, retried: Bool) async throws {
    let log = CallLog()
    var router = RPCRouter()
    router.fake(Substatus_V1_AdminService.getApp, log: log) { _, count in
      if count == 1 { throw RPCError(code: .unavailable, message: "try again") }
      return Substatus_V1_GetAppResponse()
    }
    router.fake(Substatus_V1_AdminService.revokeApiKey, log: log) { _, count in
      if count == 1 { throw RPCError(code: .unavailable, message: "try again") }
      return Substatus_V1_RevokeApiKeyResponse()
    }
    router.fake(Substatus_V1_AdminService.registerApp, log: log) { _, count in
      if count == 1 { throw RPCError(code: .unavailable, message: "try again") }
      return Substatus_V1_RegisterAppResponse()
    }
    router.fake(Substatus_V1_AdminService.setSharedSecret, log: log) { _, count in
      if count == 1 { throw RPCError(code: .unavailable, message: "try again") }
      return Substatus_V1_SetSharedSecretResponse()
    }
    let outcome: Result<Void, RPCError> = try await withFakeServer(router) { transport in
      let admin = SubstatusClient(transport: transport, apiKey: "k", retryPolicy: quick)
        .service(Substatus_V1_AdminService.Client.self)
      do throws(RPCError) {
        switch method {
        case "GetApp": _ = try await admin.getApp(Substatus_V1_GetAppRequest())
        case "RevokeApiKey": _ = try await admin.revokeApiKey(Substatus_V1_RevokeApiKeyRequest())
        case "RegisterApp": _ = try await admin.registerApp(Substatus_V1_RegisterAppRequest())
        default: _ = try await admin.setSharedSecret(Substatus_V1_SetSharedSecretRequest())
        }
        return .success(())
      } catch {
        return .failure(error)
      }
    }
    if retried {
      #expect(log.count == 2)
      #expect((try? outcome.get()) != nil)
    } else {
      #expect(log.count == 1)
      if case .failure(let error) = outcome { #expect(error.code == .unavailable) } else { Issue.record("succeeded") }
    }
  }

  @Test("a generated server-streaming method streams with the key, retried before its headers")
  func serverStreamingThroughGeneratedClient() async throws {
    let attempts = Mutex<[String]>([])
    var router = RPCRouter()
    router.registerServerStreaming(
      method: Grpc_Health_V1_Health.watch.path, request: Grpc_Health_V1_HealthCheckRequest.self,
      response: Grpc_Health_V1_HealthCheckResponse.self
    ) { _, responses, context in
      let count = attempts.withLock { attempts in
        attempts.append(context.metadata.firstString(forKey: "authorization") ?? "")
        return attempts.count
      }
      if count == 1 { throw RPCError(code: .unavailable, message: "try again") }
      for status in [Grpc_Health_V1_HealthCheckResponse.ServingStatus.serving, .notServing] {
        var response = Grpc_Health_V1_HealthCheckResponse()
        response.status = status
        responses.write(response)
      }
    }
    let statuses = try await withFakeServer(router) { transport in
      let stream = try await SubstatusClient(transport: transport, apiKey: "k", retryPolicy: quick)
        .service(Grpc_Health_V1_Health.Client.self, idempotency: .idempotent)
        .watch(Grpc_Health_V1_HealthCheckRequest())
      var statuses: [Grpc_Health_V1_HealthCheckResponse.ServingStatus] = []
      for try await response in stream { statuses.append(response.status) }
      return statuses
    }
    #expect(statuses == [.serving, .notServing])
    #expect(attempts.withLock { $0 } == ["Bearer k", "Bearer k"])
  }
}
