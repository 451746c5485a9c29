import CLinuxShims
import Foundation
import SubstatusProcessTestKit
import RPCCore
import RPCHTTP2Transport
import SubstatusClock
import Synchronization
import Testing

/// The package root, found from this file's path.
let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
  .deletingLastPathComponent()

/// The Python of the worktree's `.venv` (made by `scripts/install-deps --test`).
let python = packageRoot.appendingPathComponent(".venv/bin/python").path

/// A fixture file's path.
func fixture(_ name: String) -> String {
  Bundle.module.url(forResource: "Fixtures/\(name)", withExtension: nil)!.path
}

/// The output of a finished process.
struct ProcessResult {
  var status: Int32
  var stdout: String
  var stderr: String
}

/// Runs a process to completion, killing it after `timeout` (``runExecutable``: its exit is awaited
/// without blocking a thread of the cooperative pool).
func runProcess(_ executable: String, _ arguments: [String], timeout: Duration = .seconds(120)) async throws
  -> ProcessResult
{
  let run = try await runExecutable(executable, arguments, timeout: timeout)
  return ProcessResult(status: run.status, stdout: run.stdout, stderr: run.stderr)
}

/// What the test service's handlers observed.
final class ServiceProbe: Sendable {
  let sleepsStarted = Mutex(0)
  let sleepsCancelled = Mutex(0)
  let sleepsCompleted = Mutex(0)

  /// Waits until `condition` holds, up to `timeout` (``SubstatusProcessTestKit/waitUntil(timeout:every:_:)``).
  func waitUntil(timeout: Duration = .seconds(30), _ condition: (ServiceProbe) -> Bool) async -> Bool {
    await SubstatusProcessTestKit.waitUntil(timeout: timeout, every: .milliseconds(10)) { condition(self) }
  }
}

/// The test service, over raw bytes: Echo, Sleep (payload = milliseconds), Fail, Big (payload =
/// response size); every method runs where `execution` says.
func interopRouter(probe: ServiceProbe, execution: HandlerExecution = .pool) -> RPCRouter {
  var router = RPCRouter()
  router.registerUnaryBytes(method: "/interop.Test/Echo", execution: execution) { request, context in
    for element in context.metadata where element.key.hasPrefix("x-") {
      switch element.value {
      case .string(let value): context.response.addInitial(value, forKey: element.key)
      case .binary(let value): context.response.initial.addBinary(value, forKey: element.key)
      }
    }
    context.response.addTrailing("done", forKey: "x-trailer")
    return request
  }
  router.registerUnaryBytes(method: "/interop.Test/Sleep", execution: execution) { request, _ in
    let milliseconds = Int(String(decoding: request, as: UTF8.self)) ?? 0
    probe.sleepsStarted.withLock { $0 += 1 }
    do {
      try await Task.sleep(for: .milliseconds(milliseconds))
    } catch {
      probe.sleepsCancelled.withLock { $0 += 1 }
      throw error
    }
    probe.sleepsCompleted.withLock { $0 += 1 }
    return request
  }
  router.registerUnaryBytes(method: "/interop.Test/Fail", execution: execution) { _, _ in
    throw RPCError(code: .invalidArgument, message: "bad input: ü 100% \n done", metadata: ["x-reason": "test"])
  }
  router.registerUnaryBytes(method: "/interop.Test/Big", execution: execution) { request, _ in
    [UInt8](repeating: 7, count: Int(String(decoding: request, as: UTF8.self)) ?? 0)
  }
  return router
}

/// A running server on 127.0.0.1 with a free port.
struct TestServer {
  let transport: HTTP2ServerTransport
  let probe: ServiceProbe
  var port: Int { transport.port }
}

/// Starts the test service on a free port for the duration of `body`, then shuts it down and
/// checks that it stopped.
func withTestServer(
  threads: Int = 1, configure: (inout HTTP2ServerTransport.Configuration) -> Void = { _ in },
  router: ((ServiceProbe) -> RPCRouter)? = nil,
  _ body: (TestServer) async throws -> Void
) async throws {
  var configuration = HTTP2ServerTransport.Configuration(host: "127.0.0.1", port: 0)
  configuration.threads = threads
  configuration.shutdownGracePeriod = .seconds(5)
  configure(&configuration)
  let transport = try HTTP2ServerTransport(configuration: configuration)
  let probe = ServiceProbe()
  let server = RPCServer(transport: transport, router: (router ?? { interopRouter(probe: $0) })(probe))
  let running = Task { try await server.run() }
  do {
    try await body(TestServer(transport: transport, probe: probe))
  } catch {
    server.beginGracefulShutdown()
    _ = await running.result
    throw error
  }
  server.beginGracefulShutdown()
  try await running.value
}

/// A child process that announces itself with a first line on stdout and runs until its stdin
/// closes (the grpcio server fixture, the slow reader), on ``ChildProcess``.
final class LineProcess: Sendable {
  let child: ChildProcess
  let firstLine: String

  init(_ executable: String, _ arguments: [String]) async throws {
    child = try ChildProcess(executable, arguments, standardInput: true)
    firstLine = try await child.firstLine()
  }

  /// Closes stdin and waits for the exit status.
  func stop() async -> Int32 {
    child.closeInput()
    var exit = await child.waitForExit()
    if exit == nil { exit = await child.stop(signal: SIGKILL) }
    guard let exit else { return -1 }
    return exit.signaled ? 128 + exit.status : exit.status
  }
}

/// Runs one case of the Python grpcio client fixture against a port.
func runGRPCIOCase(_ name: String, port: Int) async throws {
  let result = try await runProcess(python, [fixture("grpcio_client.py"), String(port), name])
  #expect(result.status == 0, "grpcio case \(name) failed:\n\(result.stdout)\n\(result.stderr)")
  #expect(result.stdout.contains("PASS \(name)"))
}

/// The number of open descriptors of this process.
func openDescriptorCount() -> Int { Int(clinux_count_open_fds()) }

/// Moves a manual clock on by `step` at a time until `condition` holds (at most `steps` steps);
/// between steps the event loops, which look at a manual clock every few milliseconds, run the
/// timers that came due.
func advance(_ clock: ManualClock, by step: Duration, steps: Int = 200, until condition: () -> Bool) async -> Bool {
  for _ in 0..<steps {
    if condition() { return true }
    clock.advance(by: step)
    if await waitUntil(timeout: .milliseconds(20), condition) { return true }
  }
  return condition()
}
