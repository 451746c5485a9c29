import Foundation
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

/// A running `substatus-bench-server` child process on a free port.
final class BenchServerProcess {
  let process = Process()
  let port: Int

  init(threads: Int) async throws {
    let binary = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
      .appendingPathComponent("substatus-bench-server").path
    process.executableURL = URL(fileURLWithPath: binary)
    process.arguments = ["--listen", "127.0.0.1:0", "--threads", String(threads)]
    let stderr = Pipe()
    process.standardError = stderr
    try process.run()
    // The first stderr line names the bound address: "... listening on 127.0.0.1:PORT (...".
    let handle = stderr.fileHandleForReading
    let line = await withCheckedContinuation { continuation in
      Thread {
        var bytes = [UInt8]()
        while let byte = try? handle.read(upToCount: 1), let first = byte.first, first != UInt8(ascii: "\n") {
          bytes.append(first)
        }
        continuation.resume(returning: String(decoding: bytes, as: UTF8.self))
      }.start()
    }
    guard let range = line.range(of: "listening on 127.0.0.1:"),
      let port = Int(line[range.upperBound...].prefix { $0.isNumber })
    else {
      process.terminate()
      throw SocketTestError(description: "unexpected first line from substatus-bench-server: \(line)")
    }
    self.port = port
  }

  /// Sends SIGTERM and returns the exit status.
  func stop() async -> Int32 {
    process.terminate()
    await waitForExit(process)
    return process.terminationStatus
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
