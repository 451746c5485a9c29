import Foundation
import SubstatusProcessTestKit
import RPCCore
import RPCHTTP2Transport
import SubstatusClock
import Testing

/// The number of server-side TCP connections on `port` whose descriptors this process holds.
func serverConnectionCount(port: Int) -> Int {
  let hexPort = String(format: ":%04X", port)
  var inodes = Set<String>()
  for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
    // /proc files report size 0: read to the end rather than by size.
    guard let handle = FileHandle(forReadingAtPath: table) else { continue }
    let text = String(decoding: handle.readDataToEndOfFile(), as: UTF8.self)
    try? handle.close()
    for line in text.split(separator: "\n").dropFirst() {
      let fields = line.split(separator: " ", omittingEmptySubsequences: true)
      guard fields.count > 9, fields[1].hasSuffix(hexPort), fields[3] != "0A" else { continue }
      inodes.insert(String(fields[9]))
    }
  }
  guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") else { return -1 }
  var count = 0
  for entry in entries {
    guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(entry)"),
      target.hasPrefix("socket:[")
    else { continue }
    if inodes.contains(String(target.dropFirst(8).dropLast())) { count += 1 }
  }
  return count
}

/// Waits until the server holds no connection on `port`.
func waitForNoConnections(port: Int, timeout: Duration = .seconds(30)) async -> Bool {
  await waitUntil(timeout: timeout, every: .milliseconds(20)) { serverConnectionCount(port: port) == 0 }
}

/// Misbehaving peers: the server stays up, releases their descriptors, and keeps serving others.
@Suite struct AdversarialTests {
  @Test(arguments: [
    "garbage_preface", "truncated_frames", "oversized_headers", "continuation_flood", "rapid_reset", "ping_flood",
  ])
  func serverSurvivesMisbehavingPeer(name: String) async throws {
    try await withTestServer { server in
      let result = try await runProcess(python, [fixture("h2_attacks.py"), String(server.port), name])
      #expect(result.status == 0, "attack \(name) failed:\n\(result.stdout)\n\(result.stderr)")
      #expect(result.stdout.contains("DONE \(name)"))
      #expect(await waitForNoConnections(port: server.port), "descriptors not released after \(name)")
      try await runGRPCIOCase("unary", port: server.port)
      #expect(await waitForNoConnections(port: server.port))
    }
  }

  @Test func halfOpenConnectionsAreClosedByHandshakeTimeout() async throws {
    let clock = ManualClock()
    try await withTestServer(configure: {
      $0.clock = clock
      $0.handshakeTimeout = .seconds(10)
    }) { server in
      let attack = Task { try await runProcess(python, [fixture("h2_attacks.py"), String(server.port), "half_open"]) }
      #expect(await waitUntil { serverConnectionCount(port: server.port) == 5 })
      clock.advance(by: .seconds(10))
      let result = try await attack.value
      #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
      #expect(await waitForNoConnections(port: server.port))
      #expect(server.transport.metrics.handshakeTimeouts == 5)
    }
  }

  @Test func slowReaderDoesNotStallOtherClients() async throws {
    try await withTestServer { server in
      // The slow reader asks for 16 MiB, never reads, and stays until its stdin closes.
      let slow = try await LineProcess(python, [fixture("h2_attacks.py"), String(server.port), "slow_reader"])
      #expect(slow.firstLine == "READY")
      try await runGRPCIOCase("unary", port: server.port)
      try await runGRPCIOCase("large", port: server.port)
      #expect(serverConnectionCount(port: server.port) >= 1, "the slow reader was served while others waited")
      #expect(await slow.stop() == 0)
      #expect(await waitForNoConnections(port: server.port))
    }
  }
}
