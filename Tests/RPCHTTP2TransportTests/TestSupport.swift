import CLinuxShims
import Foundation
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

/// Runs a process to completion, killing it after `timeout`.
func runProcess(_ executable: String, _ arguments: [String], timeout: Duration = .seconds(120)) async throws
  -> ProcessResult
{
  let process = Process()
  process.executableURL = URL(fileURLWithPath: executable)
  process.arguments = arguments
  let out = Pipe()
  let err = Pipe()
  process.standardOutput = out
  process.standardError = err
  try process.run()
  let pid = process.processIdentifier
  let killer = Task {
    try await Task.sleep(for: timeout)
    kill(pid, SIGKILL)
  }
  // Blocking reads on a thread of their own: on Linux they would starve Dispatch's small pool,
  // which Foundation's Process itself needs.
  let (stdout, stderr) = await withCheckedContinuation { continuation in
    Thread {
      let stderrData = Mutex(Data())
      let stderrReader = Thread { stderrData.withLock { $0 = err.fileHandleForReading.readDataToEndOfFile() } }
      stderrReader.start()
      let stdout = out.fileHandleForReading.readDataToEndOfFile()
      process.waitUntilExit()
      while !stderrReader.isFinished { usleep(1000) }
      continuation.resume(returning: (stdout, stderrData.withLock { $0 }))
    }.start()
  }
  killer.cancel()
  return ProcessResult(
    status: process.terminationStatus, stdout: String(decoding: stdout, as: UTF8.self),
    stderr: String(decoding: stderr, as: UTF8.self))
}

/// What the test service's handlers observed.
final class ServiceProbe: Sendable {
  let sleepsStarted = Mutex(0)
  let sleepsCancelled = Mutex(0)
  let sleepsCompleted = Mutex(0)

  /// Waits until `condition` holds, up to `timeout`.
  func waitUntil(timeout: Duration = .seconds(30), _ condition: (ServiceProbe) -> Bool) async -> Bool {
    let end = ContinuousClock.now + timeout
    while ContinuousClock.now < end {
      if condition(self) { return true }
      try? await Task.sleep(for: .milliseconds(10))
    }
    return condition(self)
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
/// closes (the grpcio server fixture, the slow reader).
final class LineProcess {
  let process = Process()
  let stdin = Pipe()
  let firstLine: String

  init(_ executable: String, _ arguments: [String]) async throws {
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    let stdout = Pipe()
    process.standardOutput = stdout
    process.standardInput = stdin
    try process.run()
    let handle = stdout.fileHandleForReading
    firstLine = await withCheckedContinuation { continuation in
      Thread {
        var bytes = [UInt8]()
        while let chunk = try? handle.read(upToCount: 1), let byte = chunk.first, byte != UInt8(ascii: "\n") {
          bytes.append(byte)
        }
        continuation.resume(returning: String(decoding: bytes, as: UTF8.self))
      }.start()
    }
  }

  /// Closes stdin and waits for the exit status.
  func stop() async -> Int32 {
    try? stdin.fileHandleForWriting.close()
    await waitForExit(process)
    return process.terminationStatus
  }
}

/// Runs one case of the Python grpcio client fixture against a port.
func runGRPCIOCase(_ name: String, port: Int) async throws {
  let result = try await runProcess(python, [fixture("grpcio_client.py"), String(port), name])
  #expect(result.status == 0, "grpcio case \(name) failed:\n\(result.stdout)\n\(result.stderr)")
  #expect(result.stdout.contains("PASS \(name)"))
}

/// Waits for a process to exit without blocking a thread of the cooperative pool.
func waitForExit(_ process: Process) async {
  await withCheckedContinuation { continuation in
    Thread {
      process.waitUntilExit()
      continuation.resume()
    }.start()
  }
}

/// The number of open descriptors of this process.
func openDescriptorCount() -> Int { Int(clinux_count_open_fds()) }

/// Waits (a few milliseconds at a time) until `condition` holds, up to `timeout`.
func waitUntil(timeout: Duration = .seconds(10), _ condition: () -> Bool) async -> Bool {
  let end = ContinuousClock.now + timeout
  while ContinuousClock.now < end {
    if condition() { return true }
    try? await Task.sleep(for: .milliseconds(5))
  }
  return condition()
}

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
