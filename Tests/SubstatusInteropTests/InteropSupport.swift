import Foundation
import SubstatusProcessTestKit
import Testing

/// The repository root, found from this file's path.
let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
  .deletingLastPathComponent().deletingLastPathComponent()

/// `.venv/bin` of the repository (scripts/install-deps --test): python, buf, protoc-gen-connectrpc.
let venvBin = packageRoot.appendingPathComponent(".venv/bin")

/// The path of a test fixture.
func fixture(_ name: String) -> String {
  Bundle.module.url(forResource: "Fixtures/\(name)", withExtension: nil)?.path
    ?? "missing-fixture-\(name)"
}

/// One `substatusd` for a whole suite: started before the suite's first test, stopped after its
/// last; its tests read it from ``current``.
struct SharedServer: SuiteTrait, TestScoping {
  /// The suite's server, while the suite runs.
  @TaskLocal static var current: ServerProcess?

  /// The scope wraps the suite, not each of its tests.
  var isRecursive: Bool { false }

  func provideScope(
    for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
  ) async throws {
    let server = try await ServerProcess()
    do {
      try await Self.$current.withValue(server) { try await function() }
    } catch {
      await server.stop()
      throw error
    }
    #expect(server.isRunning, "substatusd stopped during the suite:\n\(server.output)")
    await server.stop()
  }

  /// The running server of the suite.
  static func server() throws -> ServerProcess {
    try #require(current, "the suite needs the .sharedServer trait")
  }
}

extension Trait where Self == SharedServer {
  /// Runs the suite against one `substatusd` started for it.
  static var sharedServer: SharedServer { SharedServer() }
}

/// A listener of `substatusd`: the gRPC port (HTTP/2 with prior knowledge) or the HTTP listener
/// (HTTP/1.1).
enum Listener: String, Sendable, CustomTestStringConvertible {
  case grpcPort = "h2"
  case httpListener = "h1"

  /// This listener's `HOST:PORT` on `server`.
  func address(_ server: ServerProcess) -> String {
    self == .grpcPort ? server.grpcAddress : server.httpAddress
  }

  /// This listener's base URL on `server`.
  func url(_ server: ServerProcess) -> String { "http://" + address(server) }

  var testDescription: String { self == .grpcPort ? "gRPC port, HTTP/2" : "HTTP listener, HTTP/1.1" }
}

/// Runs `Fixtures/interop.py` (scenario.json: every RPC of every service) with one client,
/// protocol, codec and listener against the suite's server; expects every step to pass.
func runScenario(client: String, protocol rpcProtocol: String, codec: String, listener: Listener)
  async throws
{
  let server = try SharedServer.server()
  let run = try await runExecutable(
    venvBin.appendingPathComponent("python").path,
    [
      fixture("interop.py"), client, rpcProtocol, codec, listener.url(server), listener.rawValue,
      server.operatorKey, packageRoot.appendingPathComponent("Protos").path,
    ])
  #expect(
    run.status == 0 && run.stdout.contains(" passed, 0 failed"),
    "\(client) \(rpcProtocol)/\(codec) on \(listener.testDescription):\n\(run.stdout)\n\(run.stderr)")
}
