import Foundation
import RPCCore
import RPCHTTP2Transport
import SubstatusClient
import SubstatusProcessTestKit
import SubstatusWire
import Synchronization
import Testing

/// Records what the fake handlers received.
final class Received: Sendable {
  let secrets = Mutex<[String]>([])
  let authorizations = Mutex<[String?]>([])
}

/// A few AdminService methods and health, over a real HTTP/2 server on a free port.
func withFakeHTTP2Server(_ body: (Int, Received) async throws -> Void) async throws {
  let received = Received()
  var router = RPCRouter()
  router.registerUnary(
    method: Substatus_V1_AdminService.getApp.path, request: Substatus_V1_GetAppRequest.self,
    response: Substatus_V1_GetAppResponse.self
  ) { request, context in
    received.authorizations.withLock {
      $0.append(context.metadata.firstString(forKey: "authorization"))
    }
    guard request.appID == "app_1" else {
      throw RPCError(code: .notFound, message: "app \"\(request.appID)\" not found")
    }
    var app = Substatus_V1_App()
    app.appID = "app_1"
    app.bundleID = "com.example.app"
    var response = Substatus_V1_GetAppResponse()
    response.app = app
    return response
  }
  router.registerUnary(
    method: Substatus_V1_AdminService.setSharedSecret.path,
    request: Substatus_V1_SetSharedSecretRequest.self,
    response: Substatus_V1_SetSharedSecretResponse.self
  ) { request, _ in
    received.secrets.withLock { $0.append(request.sharedSecret) }
    var response = Substatus_V1_SetSharedSecretResponse()
    response.fingerprint = "sha256:0011223344556677"
    return response
  }
  router.registerUnary(
    method: Grpc_Health_V1_Health.check.path, request: Grpc_Health_V1_HealthCheckRequest.self,
    response: Grpc_Health_V1_HealthCheckResponse.self
  ) { _, context in
    received.authorizations.withLock {
      $0.append(context.metadata.firstString(forKey: "authorization"))
    }
    var response = Grpc_Health_V1_HealthCheckResponse()
    response.status = .serving
    return response
  }
  var configuration = HTTP2ServerTransport.Configuration(host: "127.0.0.1", port: 0)
  configuration.threads = 1
  configuration.shutdownGracePeriod = .seconds(5)
  let transport = try HTTP2ServerTransport(configuration: configuration)
  let server = RPCServer(transport: transport, router: router)
  let running = Task { try await server.run() }
  do {
    try await body(transport.port, received)
  } catch {
    server.beginGracefulShutdown()
    _ = await running.result
    throw error
  }
  server.beginGracefulShutdown()
  try await running.value
}

@Suite("substatus binary and client over HTTP/2")
struct BinaryOverHTTP2Tests {
  @Test("the substatus executable: success, RPC failure, usage error, secret from stdin")
  func binary() async throws {
    try await withFakeHTTP2Server { port, received in
      let address = "127.0.0.1:\(port)"
      let health = try await runSubstatusBinary(["health", "--addr", address])
      #expect(health.status == 0, "\(health.stderr)")
      #expect(health.stdout == "SERVING\n")

      let show = try await runSubstatusBinary(
        ["app", "show", "app_1", "--json"],
        environment: [
          "SUBSTATUS_ADDR": address, "SUBSTATUS_API_KEY": "sk_admin",
        ])
      #expect(show.status == 0, "\(show.stderr)")
      let app = try Substatus_V1_GetAppResponse(jsonString: show.stdout).app
      #expect(app?.bundleID == "com.example.app")

      let missing = try await runSubstatusBinary([
        "app", "show", "nope", "--addr", address, "--key", "sk_admin",
      ])
      #expect(missing.status == 1)
      #expect(missing.stdout == "")
      #expect(missing.stderr == "substatus: NOT_FOUND: app \"nope\" not found\n")

      let secret = try await runSubstatusBinary(
        ["app", "set-secret", "app_1", "--addr", address, "--key", "sk_admin"],
        stdin: Array("0123456789abcdef0123456789abcdef\n".utf8))
      #expect(secret.status == 0, "\(secret.stderr)")
      #expect(secret.stdout == "fingerprint  sha256:0011223344556677\n")
      #expect(received.secrets.withLock { $0 } == ["0123456789abcdef0123456789abcdef"])

      let usage = try await runSubstatusBinary(["app", "show", "--addr", address, "--key", "k"])
      #expect(usage.status == 2)
      #expect(usage.stderr.hasPrefix("substatus app show: missing argument APP\n"))

      // health sends no key; the others send the bearer key.
      #expect(
        received.authorizations.withLock { $0 } == [nil, "Bearer sk_admin", "Bearer sk_admin"])
    }
  }

  @Test("an unreachable server is UNAVAILABLE, exit 1, within the timeout")
  func unreachable() async throws {
    // A port that was free a moment ago: bind, read it, close.
    let port = try HTTP2ServerTransport(configuration: .init(host: "127.0.0.1", port: 0)).port
    let clock = ContinuousClock()
    let start = clock.now
    let run = try await runSubstatusBinary([
      "health", "--addr", "127.0.0.1:\(port)", "--timeout", "3",
    ])
    #expect(run.status == 1)
    #expect(run.stderr.hasPrefix("substatus: UNAVAILABLE: "))
    #expect(run.stderr.split(separator: "\n").count == 1)
    #expect(clock.now - start < .seconds(10))
  }

  @Test("SubstatusClient(address:) calls the server over HTTP/2 with the key")
  func clientOverHTTP2() async throws {
    try await withFakeHTTP2Server { port, received in
      let client = try SubstatusClient(address: "127.0.0.1:\(port)", apiKey: "sk_admin")
      #expect(try await client.getApp(appID: "app_1").bundleID == "com.example.app")
      let error = await #expect(throws: RPCError.self) { try await client.getApp(appID: "x") }
      #expect(error?.code == .notFound)
      #expect(received.authorizations.withLock { $0 } == ["Bearer sk_admin", "Bearer sk_admin"])
    }
  }

  @Test(
    "addresses parse as HOST:PORT",
    arguments: [
      ("127.0.0.1:50051", "127.0.0.1", 50051), ("[::1]:7", "::1", 7),
      ("substatus.internal:443", "substatus.internal", 443),
    ] as [(String, String, Int)])
  func addresses(_ address: String, _ host: String, _ port: Int) throws {
    let parsed = try SubstatusClient.parseAddress(address)
    #expect(parsed.host == host && parsed.port == port)
  }

  @Test(
    "malformed addresses are INVALID_ARGUMENT",
    arguments: ["", "host", ":80", "host:0", "host:65536", "host:x"])
  func badAddresses(_ address: String) {
    #expect(throws: RPCError.self) { try SubstatusClient.parseAddress(address) }
  }
}
