import Foundation
import SubstatusProcessTestKit
import RPCHTTP2Transport
import Testing

/// The shared peer-bench folder (grpc-go peer and load generator), searched for above the package.
let peerBenchDirectory: String? = {
  var directory = packageRoot
  for _ in 0..<4 {
    let candidate = directory.appendingPathComponent("shared/peer-bench").path
    if FileManager.default.fileExists(atPath: candidate + "/src/peerbench/cmd/loadgen/main.go") { return candidate }
    directory = directory.deletingLastPathComponent()
  }
  return nil
}()

let goToolchain: String? = ["/usr/bin/go", "/usr/lib/go/bin/go"].first { FileManager.default.isExecutableFile(atPath: $0) }

/// Builds peer-bench's grpc-go load generator into `.build/peer-bench-loadgen` (once), offline, in
/// GOPATH mode against Debian's packages, from a copy: no peer-bench file enters this repository.
func buildLoadgen() async throws -> String {
  let output = packageRoot.appendingPathComponent(".build/peer-bench-loadgen")
  let binary = output.appendingPathComponent("loadgen").path
  if FileManager.default.isExecutableFile(atPath: binary) { return binary }
  let work = FileManager.default.temporaryDirectory.appendingPathComponent("substatus-loadgen-\(getpid())")
  defer { try? FileManager.default.removeItem(at: work) }
  let script = """
    set -eu
    mkdir -p '\(work.path)' '\(output.path)'
    cp -r '\(peerBenchDirectory!)/src' '\(peerBenchDirectory!)/proto' '\(work.path)/'
    cd '\(work.path)'
    mkdir -p src/peerbench/benchpb
    protoc -I proto --go_out=plugins=grpc,paths=source_relative:src/peerbench/benchpb proto/bench.proto
    GO111MODULE=off GOPATH='\(work.path):/usr/share/gocode' GOFLAGS= GOPROXY=off GOCACHE='\(output.path)/go-cache' \
      \(goToolchain!) build -o '\(binary).tmp' peerbench/cmd/loadgen
    mv '\(binary).tmp' '\(binary)'
    """
  let result = try await runProcess("/bin/sh", ["-c", script], timeout: .seconds(600))
  guard result.status == 0 else {
    Issue.record("building loadgen failed:\n\(result.stderr)")
    throw CancellationError()
  }
  return binary
}

/// A running `substatus-bench-server` child process on a free port (``ChildProcess``).
final class BenchServerProcess: Sendable {
  let child: ChildProcess
  let port: Int
  /// The server's first line: "... listening on 127.0.0.1:PORT (tls=..., threads=N, ...)".
  let firstLine: String

  /// Starts the server with `threads` event loops (nil: its default), pinned with `taskset -c`
  /// to `cpus` if given.
  init(threads: Int?, cpus: String? = nil) async throws {
    let binary = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
      .appendingPathComponent("substatus-bench-server").path
    let arguments = ["--listen", "127.0.0.1:0"] + (threads.map { ["--threads", String($0)] } ?? [])
    if let cpus {
      child = try ChildProcess("/usr/bin/taskset", ["-c", cpus, binary] + arguments)
    } else {
      child = try ChildProcess(binary, arguments)
    }
    // The first stderr line names the bound address: "... listening on 127.0.0.1:PORT (...".
    let line = try await child.firstLine(ofStandardError: true)
    guard let range = line.range(of: "listening on 127.0.0.1:"),
      let port = Int(line[range.upperBound...].prefix { $0.isNumber })
    else {
      child.send(SIGKILL)
      throw SocketTestError(description: "unexpected first line from substatus-bench-server: \(line)")
    }
    self.port = port
    self.firstLine = line
  }

  /// Sends SIGTERM and returns the exit status (128 + 9 if it had to be killed after `limit`).
  func stop(killingAfter limit: Duration = .seconds(20)) async -> Int32 {
    let exit = await child.stop(killingAfter: limit)
    return exit.signaled ? 128 + exit.status : exit.status
  }
}

struct SocketTestError: Error, CustomStringConvertible { let description: String }

/// grpc-go's conformance check (`loadgen -verify`: Echo 0 B…1 MiB, every user × product of
/// WORKLOAD.md) against `substatus-bench-server`; needs the Go toolchain and peer-bench.
@Suite(.enabled(if: peerBenchDirectory != nil && goToolchain != nil, "needs Go and ../shared/peer-bench"))
struct BenchServerConformanceTests {
  @Test func grpcGoLoadgenVerifies() async throws {
    let loadgen = try await buildLoadgen()
    let server = try await BenchServerProcess(threads: 2)
    let result = try await runProcess(loadgen, ["-addr", "127.0.0.1:\(server.port)", "-verify"])
    #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
    #expect(result.stdout.contains("VERIFY OK") || result.stderr.contains("VERIFY OK"))
    #expect(await server.stop() == 0, "the bench server did not shut down cleanly on SIGTERM")
  }
}

/// The transport's default number of event loops follows the CPUs the process may run on.
@Suite struct EventLoopCountTests {
  @Test func defaultIsTheCPUsOfTheAffinityMask() async throws {
    #expect(HTTP2ServerTransport.Configuration.availableCPUs >= 1)
    #expect(HTTP2ServerTransport.Configuration.availableCPUs <= ProcessInfo.processInfo.activeProcessorCount)
    // Pinned to one CPU (as `taskset` or a cpuset does), one loop: more would only take turns.
    let pinned = try await BenchServerProcess(threads: nil, cpus: "0")
    #expect(pinned.firstLine.contains("threads=1,"), "\(pinned.firstLine)")
    #expect(await pinned.stop() == 0)
    let explicit = try await BenchServerProcess(threads: 3, cpus: "0")
    #expect(explicit.firstLine.contains("threads=3,"), "\(explicit.firstLine)")
    #expect(await explicit.stop() == 0)
  }
}

/// SIGTERM is never lost, however soon after start-up it comes (`ProcessSignals`): with Dispatch
/// signal sources, a SIGTERM sent right after the server's first line was dropped in about one run
/// in ten (three loops on one CPU), and the server never stopped.
@Suite struct TerminationSignalTests {
  @Test func sigtermRightAfterStartUpStopsTheServer() async throws {
    for _ in 0..<25 {
      let server = try await BenchServerProcess(threads: 3, cpus: "0")
      let status = await server.stop(killingAfter: .seconds(10))
      #expect(status == 0, "the server did not stop on SIGTERM (killed after 10 s)")
      if status != 0 { return }
    }
  }
}
