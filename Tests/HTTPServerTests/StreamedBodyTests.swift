import Foundation
import Synchronization
import Testing

import HTTPServer
import HTTPTestSupport

/// Byte `i` of every streamed test body: `i % 251`, so a lost, repeated or reordered chunk shows.
private func pattern(from offset: Int, count: Int) -> [UInt8] {
  (offset..<offset + count).map { UInt8($0 % 251) }
}

/// What a streamed body's producer did, for the test to watch.
private final class ProducerProbe: Sendable {
  let written = Mutex(0)
  /// The most bytes left pending when a write returned.
  let mostPendingAfterWrite = Mutex(0)
  let writer = Mutex<HTTPBodyWriter?>(nil)
  let ended = Mutex<String?>(nil)
  /// Whether the producer's task was cancelled when its write failed.
  let cancelledAtFailure = Mutex<Bool?>(nil)

  /// A write waits: more than the bound is pending (a write returns only below it).
  var isHeldBack: Bool {
    writer.withLock { writer in writer.map { $0.pendingBytes > $0.maxPendingBytes } ?? false }
  }
}

@Suite("HTTPServer streamed bodies")
struct StreamedBodyTests {
  /// Writes `total` bytes of the pattern in `chunk`-byte writes, then returns.
  private func server(
    probe: ProducerProbe, total: Int? = nil, chunk: Int = 64 * 1024, idleAfter: Int? = nil
  ) throws -> HTTPServer {
    try HTTPServer(configuration: .init(host: "127.0.0.1", port: 0)) { _ in
      .streamed(headers: ["Content-Type": "application/octet-stream"], maxPendingBytes: 64 * 1024) { writer in
        probe.writer.withLock { $0 = writer }
        var offset = 0
        do {
          while total.map({ offset < $0 }) ?? true {
            if let idleAfter, offset >= idleAfter {
              try await Task.sleep(for: .seconds(3600))  // cancelled when the client goes
            }
            let count = min(chunk, (total ?? .max) - offset, (idleAfter ?? .max) - offset)
            try await writer.write(pattern(from: offset, count: count))
            let pending = writer.pendingBytes
            probe.mostPendingAfterWrite.withLock { $0 = max($0, pending) }
            offset += count
            probe.written.withLock { $0 = offset }
          }
          probe.ended.withLock { $0 = "returned" }
        } catch {
          probe.cancelledAtFailure.withLock { $0 = Task.isCancelled }
          probe.ended.withLock { $0 = error is CancellationError ? "cancelled" : "failed: \(error)" }
          throw error
        }
      }
    }
  }

  @Test func aSlowReaderHoldsTheProducerBackAndGetsEveryByte() async throws {
    let probe = ProducerProbe()
    let total = 8 << 20
    let server = try server(probe: probe, total: total)
    let client = try ScriptedProcess(python, [fixture("slow_reader.py"), String(server.port), "/stream"])
    defer { client.stop() }
    #expect(await client.nextLine() == "HEAD 200 chunked")
    #expect(await client.ask("read 1000") == "READ 1000")
    // The client stops reading: the socket buffers fill and the producer's write waits, and
    // keeps waiting (held back for 50 looks in a row), with the 64 KiB bound and the kernel's
    // buffers (a 4 MiB send buffer at most here) written, not all 8 MiB.
    var heldLooks = 0
    #expect(
      await waitUntil {
        heldLooks = probe.isHeldBack ? heldLooks + 1 : 0
        return heldLooks >= 50 || probe.written.withLock { $0 } >= 6 << 20
      })
    let writtenWhileHeld = probe.written.withLock { $0 }
    #expect(writtenWhileHeld < 6 << 20, "the producer ran ahead of the reader: \(writtenWhileHeld) bytes")
    #expect(probe.writer.withLock { $0?.pendingBytes ?? 0 } <= 2 * 64 * 1024)
    #expect(await client.ask("rest") == "END \(total) ok")
    // A write returns only once the pending bytes are back under the bound.
    #expect(probe.mostPendingAfterWrite.withLock { $0 } <= 64 * 1024)
    #expect(await waitUntil { probe.ended.withLock { $0 } == "returned" })
    await server.stop()
  }

  @Test func anIdleStreamWhoseClientLeavesCancelsItsProducer() async throws {
    let probe = ProducerProbe()
    let server = try server(probe: probe, chunk: 100, idleAfter: 100)
    let client = try ScriptedProcess(python, [fixture("slow_reader.py"), String(server.port), "/stream"])
    defer { client.stop() }
    #expect(await client.nextLine() == "HEAD 200 chunked")
    #expect(await client.ask("read 100") == "READ 100")
    #expect(server.openConnections == 1)
    #expect(await client.ask("close") == "CLOSED")
    #expect(await waitUntil { probe.ended.withLock { $0 } == "cancelled" })
    #expect(await waitUntil { server.openConnections == 0 })
    await server.stop()
  }

  @Test func aBusyStreamWhoseClientLeavesFailsTheWrite() async throws {
    let probe = ProducerProbe()
    let server = try server(probe: probe)  // writes until a write fails
    let client = try ScriptedProcess(python, [fixture("slow_reader.py"), String(server.port), "/stream"])
    defer { client.stop() }
    #expect(await client.nextLine() == "HEAD 200 chunked")
    #expect(await client.ask("read 100000") == "READ 100000")
    #expect(await waitUntil { probe.isHeldBack })
    #expect(await client.ask("close") == "CLOSED")
    #expect(await waitUntil { probe.ended.withLock { $0 } == "cancelled" })
    // Its task was cancelled before the waiting write threw (a producer that relies on
    // cancellation handlers sees them run while it still waits).
    #expect(probe.cancelledAtFailure.withLock { $0 } == true)
    #expect(await waitUntil { server.openConnections == 0 })
    await server.stop()
  }

  @Test func stoppingTheServerEndsLiveStreams() async throws {
    let probe = ProducerProbe()
    let server = try server(probe: probe, chunk: 10, idleAfter: 10)
    let client = try ScriptedProcess(python, [fixture("slow_reader.py"), String(server.port), "/stream"])
    defer { client.stop() }
    #expect(await client.nextLine() == "HEAD 200 chunked")
    #expect(await client.ask("read 10") == "READ 10")
    let started = ContinuousClock.now
    await server.stop(gracePeriod: .milliseconds(100))
    #expect(ContinuousClock.now - started < .seconds(3))
    #expect(await waitUntil { probe.ended.withLock { $0 } == "cancelled" })
  }

  @Test func aWholeBodyStillGoesOutWithContentLength() async throws {
    let server = try HTTPServer(configuration: .init(host: "127.0.0.1", port: 0)) { _ in .text("whole") }
    let response = try await send("GET", server, "/")
    #expect(response.text == "whole")
    #expect(response.headers["content-length"] == "5")
    await server.stop()
  }
}
