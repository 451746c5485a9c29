import Foundation
import SubstatusProcessTestKit
import Testing

/// One way to call: a protocol and codec on a listener.
struct Call: Sendable, CustomTestStringConvertible {
  var rpcProtocol: String
  var codec: String
  var listener: Listener

  var testDescription: String { "\(rpcProtocol) \(codec), \(listener.testDescription)" }
}

/// The Buf CLI's `buf curl` (a Go client, connect-go) calls every RPC of every service in each
/// protocol it speaks, on both listeners: over HTTP/2 it learns the schema by server reflection,
/// over HTTP/1.1 from an image of Protos/ (buf curl runs reflection, a bidirectional stream, over
/// HTTP/2 only; connectrpc calls it over HTTP/1.1 too, half duplex).
@Suite(.serialized, .sharedServer)
struct BufCurlInteropTests {
  static let calls: [Call] = [
    Call(rpcProtocol: "grpc", codec: "proto", listener: .grpcPort),
    Call(rpcProtocol: "connect", codec: "proto", listener: .grpcPort),
    Call(rpcProtocol: "grpcweb", codec: "proto", listener: .grpcPort),
    Call(rpcProtocol: "connect", codec: "proto", listener: .httpListener),
    Call(rpcProtocol: "grpcweb", codec: "proto", listener: .httpListener),
  ]

  @Test("buf curl calls every RPC", arguments: calls)
  func everyRPC(_ call: Call) async throws {
    try await runScenario(
      client: "bufcurl", protocol: call.rpcProtocol, codec: call.codec, listener: call.listener)
  }

  @Test("scenario.json calls every method that server reflection lists")
  func scenarioCoversEveryMethod() async throws {
    let server = try SharedServer.server()
    let listed = try await runExecutable(
      venvBin.appendingPathComponent("buf").path,
      ["curl", "--protocol", "grpc", "--list-methods", Listener.grpcPort.url(server)])
    #expect(listed.status == 0, "\(listed.stderr)")
    let methods = Set(listed.stdout.split(separator: "\n").map(String.init))
    let scenario = try JSONSerialization.jsonObject(
      with: Data(contentsOf: URL(fileURLWithPath: fixture("scenario.json")))) as? [String: Any]
    let steps = try #require(scenario?["steps"] as? [[String: Any]])
    let called = Set(steps.compactMap { $0["call"] as? String })
    #expect(methods.contains("substatus.v1.EligibilityService/CheckEligibility"), "\(methods)")
    #expect(methods.contains("grpc.health.v1.Health/Watch"), "\(methods)")
    #expect(methods.subtracting(called).isEmpty, "not in scenario.json: \(methods.subtracting(called).sorted())")
    #expect(called.subtracting(methods).isEmpty, "not served: \(called.subtracting(methods).sorted())")
  }
}

/// PyPI's `connectrpc` client, with code generated from Protos/ by grpcio-tools' protoc and
/// protoc-gen-connectrpc, calls every RPC of every service in JSON and binary: Connect, gRPC and
/// gRPC-Web, on both listeners (gRPC needs HTTP/2, so only on the gRPC port).
@Suite(.serialized, .sharedServer)
struct ConnectPythonInteropTests {
  static let calls: [Call] = [
    Call(rpcProtocol: "connect", codec: "json", listener: .grpcPort),
    Call(rpcProtocol: "connect", codec: "proto", listener: .grpcPort),
    Call(rpcProtocol: "grpc", codec: "json", listener: .grpcPort),
    Call(rpcProtocol: "grpc", codec: "proto", listener: .grpcPort),
    Call(rpcProtocol: "grpcweb", codec: "proto", listener: .grpcPort),
    Call(rpcProtocol: "connect", codec: "json", listener: .httpListener),
    Call(rpcProtocol: "connect", codec: "proto", listener: .httpListener),
    Call(rpcProtocol: "grpcweb", codec: "json", listener: .httpListener),
    Call(rpcProtocol: "grpcweb", codec: "proto", listener: .httpListener),
  ]

  @Test("connectrpc calls every RPC", arguments: calls)
  func everyRPC(_ call: Call) async throws {
    try await runScenario(
      client: "connectrpc", protocol: call.rpcProtocol, codec: call.codec, listener: call.listener)
  }
}

/// Plain curl posting JSON (Connect's unary form, no Connect header) calls every unary RPC on both
/// listeners; each error's HTTP status is the one the Connect specification gives its code.
@Suite(.serialized, .sharedServer)
struct CurlInteropTests {
  @Test("curl calls every unary RPC with JSON", arguments: [Listener.httpListener, .grpcPort])
  func everyUnaryRPC(_ listener: Listener) async throws {
    try await runScenario(client: "curl", protocol: "connect", codec: "json", listener: listener)
  }
}
