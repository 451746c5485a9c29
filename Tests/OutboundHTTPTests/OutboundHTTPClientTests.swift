import Foundation
import Synchronization
import Testing

@testable import OutboundHTTP

/// The misbehaving receiver (`Fixtures/receiver.py`) on port 0, its events read on a thread of
/// their own (blocking reads never run on the cooperative pool).
final class Receiver: Sendable {
  enum Event: Sendable, Hashable {
    case open(Int)
    case request(Int, method: String, path: String, bodyBytes: Int)
    case closed(Int, sent: Int)
  }

  private final class Box: Sendable {
    let port = Mutex<Int?>(nil)
    let events = Mutex<[Event]>([])
    let pending = Mutex([UInt8]())
  }

  private let process: Process
  private let input = Pipe()
  private let box = Box()

  static var fixtures: URL { URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures") }

  /// Starts the receiver (`host` 127.0.0.1 or ::1; with the fixture certificate when `tls`).
  static func start(host: String = "127.0.0.1", tls: Bool = false) async throws -> Receiver {
    var arguments = [fixtures.appendingPathComponent("receiver.py").path, "--host", host]
    if tls {
      arguments += [
        "--tls", fixtures.appendingPathComponent("receiver-cert.pem").path,
        fixtures.appendingPathComponent("receiver-key.pem").path,
      ]
    }
    let receiver = try Receiver(arguments: arguments)
    try await waitUntil("the receiver's port") { receiver.box.port.withLock { $0 } != nil }
    return receiver
  }

  private init(arguments: [String]) throws {
    process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
    process.arguments = arguments
    let out = Pipe()
    process.standardOutput = out
    process.standardInput = input
    let handle = out.fileHandleForReading
    let box = self.box
    let reader = Thread {
      while true {
        let data = handle.availableData
        if data.isEmpty { return }
        let lines: [String] = box.pending.withLock { r in
          r += data
          var lines: [String] = []
          while let nl = r.firstIndex(of: UInt8(ascii: "\n")) {
            lines.append(String(decoding: r[..<nl], as: UTF8.self))
            r.removeSubrange(...nl)
          }
          return lines
        }
        for line in lines {
          let f = line.split(separator: " ").map(String.init)
          switch f.first {
          case "PORT": box.port.withLock { $0 = Int(f[1]) }
          case "OPEN": box.events.withLock { $0.append(.open(Int(f[1])!)) }
          case "REQUEST":
            box.events.withLock { $0.append(.request(Int(f[1])!, method: f[2], path: f[3], bodyBytes: Int(f[4])!)) }
          case "CLOSED": box.events.withLock { $0.append(.closed(Int(f[1])!, sent: Int(f[2])!)) }
          default: break
          }
        }
      }
    }
    try process.run()
    reader.start()
  }

  deinit {
    try? input.fileHandleForWriting.close()
    process.terminate()
  }

  var port: Int { box.port.withLock { $0 } ?? 0 }
  var events: [Event] { box.events.withLock { $0 } }
  var opened: Int { events.count { if case .open = $0 { true } else { false } } }
  var closed: [(id: Int, sent: Int)] {
    events.compactMap { if case .closed(let id, let sent) = $0 { (id, sent) } else { nil } }
  }
  func url(_ path: String) -> String { "http://127.0.0.1:\(port)\(path)" }
}

/// Polls `condition` every 10 ms of real time for at most `timeout` (waits for I/O).
func waitUntil(_ what: String, timeout: Duration = .seconds(10), _ condition: () async throws -> Bool) async throws {
  let deadline = ContinuousClock.now + timeout
  while try await !condition() {
    guard ContinuousClock.now < deadline else {
      Issue.record("timed out waiting for \(what)")
      throw CancellationError()
    }
    try await Task.sleep(for: .milliseconds(10))
  }
}

/// A policy refusing loopback addresses (127/8, ::1), recording every address it was asked about.
final class LoopbackRefusal: Sendable {
  let seen = Mutex<[OutboundAddress]>([])
  let refuse: @Sendable (OutboundAddress) -> Bool
  init(refuse: @escaping @Sendable (OutboundAddress) -> Bool = { a in
    a.bytes.count == 4 ? a.bytes[0] == 127 : a.bytes == [UInt8](repeating: 0, count: 15) + [1]
  }) { self.refuse = refuse }
  var policy: OutboundAddressPolicy {
    { address in
      self.seen.withLock { $0.append(address) }
      return self.refuse(address) ? "the address is loopback" : nil
    }
  }
}

@Suite("OutboundHTTPClient against local receivers", .serialized)
struct OutboundHTTPClientTests {
  @Test("a POST is answered; the connection is kept alive and reused")
  func answeredAndReused() async throws {
    let receiver = try await Receiver.start()
    let client = OutboundHTTPClient()
    defer { client.shutdown() }
    for _ in 0..<3 {
      var request = OutboundRequest(method: .post, url: receiver.url("/ok"), body: Array(repeating: 7, count: 5000))
      request.headers = [("Content-Type", "application/json")]
      let response = try await client.send(request)
      #expect(response.status == 200)
      #expect(response.body == Array("ok".utf8))
      #expect(!response.truncated)
    }
    try await waitUntil("three requests") { receiver.events.count { if case .request = $0 { true } else { false } } == 3 }
    #expect(receiver.opened == 1)
    #expect(receiver.events.contains(.request(1, method: "POST", path: "/ok", bodyBytes: 5000)))
    #expect(client.metrics.connectionsOpen == 1)
    #expect(client.metrics.requests["ok"] == 3)
  }

  @Test("a PUT sends its method and body, shares the POST's connection and keeps the limits", arguments: [0, 5000])
  func putSendsMethodAndBody(bodyBytes: Int) async throws {
    let receiver = try await Receiver.start()
    let client = OutboundHTTPClient()
    defer { client.shutdown() }
    var put = OutboundRequest(method: .put, url: receiver.url("/ok"), body: Array(repeating: 7, count: bodyBytes))
    put.headers = [("Content-Type", "application/json")]
    let response = try await client.send(put)
    #expect(response.status == 200)
    #expect(response.body == Array("ok".utf8))
    // A POST and a GET after it on the same connection are sent as themselves.
    _ = try await client.send(OutboundRequest(method: .post, url: receiver.url("/ok"), body: [1, 2, 3]))
    _ = try await client.send(OutboundRequest(method: .get, url: receiver.url("/ok")))
    var cut = OutboundRequest(method: .put, url: receiver.url("/endless"), body: [1])
    cut.maxResponseBytes = 10_000
    let truncated = try await client.send(cut)
    #expect(truncated.truncated && truncated.body.count == 10_000)
    try await waitUntil("four requests") { receiver.events.count { if case .request = $0 { true } else { false } } == 4 }
    let requests = receiver.events.filter { if case .request = $0 { true } else { false } }
    #expect(
      requests == [
        .request(1, method: "PUT", path: "/ok", bodyBytes: bodyBytes), .request(1, method: "POST", path: "/ok", bodyBytes: 3),
        .request(1, method: "GET", path: "/ok", bodyBytes: 0), .request(1, method: "PUT", path: "/endless", bodyBytes: 1),
      ])
  }

  @Test("a body trickled a byte a second ends at the total deadline, and its connection is closed")
  func trickleEndsAtDeadline() async throws {
    let receiver = try await Receiver.start()
    let client = OutboundHTTPClient()
    defer { client.shutdown() }
    var request = OutboundRequest(method: .post, url: receiver.url("/trickle"))
    request.timeout = .milliseconds(2500)
    let started = ContinuousClock.now
    await #expect(throws: OutboundHTTPError.self) { _ = try await client.send(request) }
    let elapsed = ContinuousClock.now - started
    do { _ = try await client.send(request) } catch { #expect(error.code == .timeout) }
    #expect(elapsed >= .milliseconds(2400) && elapsed < .milliseconds(3500), "\(elapsed)")
    try await waitUntil("both connections closed") { receiver.closed.count == 2 }
    #expect(client.metrics.connectionsOpen == 0)
    #expect(client.metrics.requests["timeout"] == 2)
  }

  @Test("an endless body is cut at the limit and its connection closed")
  func endlessBodyCut() async throws {
    let receiver = try await Receiver.start()
    let client = OutboundHTTPClient()
    defer { client.shutdown() }
    var request = OutboundRequest(method: .post, url: receiver.url("/endless"))
    request.maxResponseBytes = 100_000
    request.timeout = .seconds(20)
    let response = try await client.send(request)
    #expect(response.status == 200)
    #expect(response.truncated)
    #expect(response.body.count == 100_000)
    #expect(response.duration < .seconds(5))
    try await waitUntil("the connection closed") { receiver.closed.count == 1 }
    // The receiver could send what the socket buffers hold, not the endless rest.
    #expect(receiver.closed[0].sent < 20 << 20)
    #expect(client.metrics.connectionsOpen == 0)
    #expect(client.metrics.requests["too_large"] == 1)
  }

  @Test("a 1 GB Content-Length is refused before its body is read")
  func hugeContentLengthRefused() async throws {
    let receiver = try await Receiver.start()
    let client = OutboundHTTPClient()
    defer { client.shutdown() }
    var request = OutboundRequest(method: .get, url: receiver.url("/huge-length"))
    request.maxResponseBytes = 4096
    let response = try await client.send(request)
    #expect(response.status == 200)
    #expect(response.truncated)
    #expect(response.body.isEmpty)
    #expect(response.duration < .seconds(2))
    try await waitUntil("the connection closed") { receiver.closed.count == 1 }
    #expect(client.metrics.connectionsOpen == 0)
  }

  @Test("an address the policy refuses is never connected to")
  func addressRefused() async throws {
    let receiver = try await Receiver.start()
    let client = OutboundHTTPClient()
    defer { client.shutdown() }
    let refusal = LoopbackRefusal()
    var request = OutboundRequest(method: .post, url: "http://localhost:\(receiver.port)/ok")
    request.addressPolicy = refusal.policy
    do {
      _ = try await client.send(request)
      Issue.record("answered")
    } catch {
      #expect(error.code == .addressRefused)
      #expect(error.message == "the address is loopback")
    }
    #expect(refusal.seen.withLock { $0 }.contains(OutboundAddress(bytes: [127, 0, 0, 1], port: receiver.port)))
    #expect(receiver.opened == 0)
    #expect(client.metrics.connectionsOpen == 0)
    #expect(client.metrics.requests["address_refused"] == 1)
  }

  @Test("IPv6: a receiver on [::1] is reached and its address checked")
  func ipv6() async throws {
    let receiver = try await Receiver.start(host: "::1")
    let client = OutboundHTTPClient()
    defer { client.shutdown() }
    let policy = LoopbackRefusal(refuse: { _ in false })
    var request = OutboundRequest(method: .post, url: "http://[::1]:\(receiver.port)/ok")
    request.addressPolicy = policy.policy
    let response = try await client.send(request)
    #expect(response.status == 200)
    #expect(policy.seen.withLock { $0 } == [OutboundAddress(bytes: [UInt8](repeating: 0, count: 15) + [1], port: receiver.port)])
  }

  @Test(
    "a name's next address is tried after a dead or refused one",
    arguments: [
      ("[::1],127.0.0.1", false),  // IPv6 first, nothing listens there: refused, then IPv4
      ("127.0.0.2,127.0.0.1", false),  // a refused first address of the same family
      ("10.255.255.1,127.0.0.1", false),  // a first address that never answers (or is unreachable)
      ("127.0.0.2,127.0.0.1", true),  // the first refused by the policy, the second allowed
    ])
  func nextAddress(addresses: String, refuseFirst: Bool) async throws {
    let receiver = try await Receiver.start()
    let client = OutboundHTTPClient()
    defer { client.shutdown() }
    let policy = LoopbackRefusal(refuse: { a in refuseFirst && a.bytes == [127, 0, 0, 2] })
    var request = OutboundRequest(method: .post, url: "http://multi.test:\(receiver.port)/ok")
    request.addressOverrides = ["multi.test:\(receiver.port):\(addresses)"]
    request.addressPolicy = policy.policy
    let response = try await client.send(request)
    #expect(response.status == 200)
    let seen = policy.seen.withLock { $0 }.map(\.bytes)
    #expect(seen.count == 2)
    #expect(seen.last == [127, 0, 0, 1])
    try await waitUntil("the policy's view") { client.metrics.connectionsOpen == 1 }
  }

  @Test("TLS: verified against --outbound-ca-file; refused without it")
  func tls() async throws {
    let receiver = try await Receiver.start(tls: true)
    let trusting = OutboundHTTPClient(
      configuration: .init(caFile: Receiver.fixtures.appendingPathComponent("receiver-cert.pem").path))
    defer { trusting.shutdown() }
    let url = "https://localhost:\(receiver.port)/ok"
    let response = try await trusting.send(OutboundRequest(method: .post, url: url))
    #expect(response.status == 200)
    #expect(response.body == Array("ok".utf8))
    let plain = OutboundHTTPClient()
    defer { plain.shutdown() }
    do {
      _ = try await plain.send(OutboundRequest(method: .post, url: url))
      Issue.record("a self-signed certificate was trusted")
    } catch {
      #expect(error.code == .tlsFailed)
    }
    #expect(plain.metrics.requests["tls_failed"] == 1)
  }

  @Test("redirects: not followed by default, followed when allowed")
  func redirects() async throws {
    let receiver = try await Receiver.start()
    let client = OutboundHTTPClient()
    defer { client.shutdown() }
    var request = OutboundRequest(method: .get, url: receiver.url("/redirect"))
    #expect(try await client.send(request).status == 302)
    request.maxRedirects = 3
    #expect(try await client.send(request).status == 200)
  }

  @Test("a cancelled caller returns at once and its connection is closed")
  func cancellation() async throws {
    let receiver = try await Receiver.start()
    let client = OutboundHTTPClient()
    defer { client.shutdown() }
    var request = OutboundRequest(method: .post, url: receiver.url("/trickle"))
    request.timeout = .seconds(60)
    let trickle = request
    let task = Task { () -> OutboundHTTPError.Code? in
      do throws(OutboundHTTPError) {
        _ = try await client.send(trickle)
        return nil
      } catch { return error.code }
    }
    try await waitUntil("the request") { receiver.events.contains { if case .request = $0 { true } else { false } } }
    let started = ContinuousClock.now
    task.cancel()
    #expect(await task.value == .cancelled)
    #expect(ContinuousClock.now - started < .seconds(1))
    try await waitUntil("the connection closed") { receiver.closed.count == 1 }
    #expect(client.metrics.connectionsOpen == 0)
    #expect(client.metrics.inFlight == 0)
  }

  @Test("the connection cap holds: requests over it wait for a connection, within their deadline")
  func connectionCap() async throws {
    let receiver = try await Receiver.start()
    let client = OutboundHTTPClient(configuration: .init(maxConnections: 2))
    defer { client.shutdown() }
    var request = OutboundRequest(method: .post, url: receiver.url("/trickle"))
    request.timeout = .milliseconds(1500)
    let trickle = request
    let sampling = Task {
      var most = 0
      while !Task.isCancelled {
        most = max(most, client.metrics.connectionsOpen)
        try? await Task.sleep(for: .milliseconds(5))
      }
      return most
    }
    let codes = await withTaskGroup(of: OutboundHTTPError.Code?.self) { group in
      for _ in 0..<4 {
        group.addTask {
          do throws(OutboundHTTPError) {
            _ = try await client.send(trickle)
            return nil
          } catch { return error.code }
        }
      }
      var codes: [OutboundHTTPError.Code?] = []
      for await code in group { codes.append(code) }
      return codes
    }
    sampling.cancel()
    #expect(codes == Array(repeating: OutboundHTTPError.Code.timeout, count: 4))
    // Two at once; the waiting ones may connect when the first two close, just before their own
    // deadline.
    #expect(await sampling.value == 2)
    #expect(receiver.opened >= 2)
    #expect(client.metrics.connectionLimit == 2)
  }

  @Test("a URL that is not http(s) is refused before any I/O")
  func invalidURL() async throws {
    let client = OutboundHTTPClient()
    defer { client.shutdown() }
    do {
      _ = try await client.send(OutboundRequest(method: .get, url: "file:///etc/passwd"))
      Issue.record("sent")
    } catch {
      #expect(error.code == .invalidRequest)
    }
  }
}

@Test("the metrics render one family per name, a sample per pool and outcome")
func metricsText() {
  let m = OutboundHTTPMetrics(connectionsOpen: 3, connectionLimit: 48, inFlight: 1, requests: ["ok": 5, "timeout": 2])
  let text = OutboundHTTPMetrics.prometheusText(pools: [("webhooks", m), ("apple", m)])
  #expect(text.contains("substatus_outbound_connections_open{pool=\"webhooks\"} 3\n"))
  #expect(text.contains("substatus_outbound_connections_limit{pool=\"apple\"} 48\n"))
  #expect(text.contains("substatus_outbound_requests_total{pool=\"webhooks\",outcome=\"timeout\"} 2\n"))
  #expect(text.components(separatedBy: "# TYPE substatus_outbound_requests_total counter").count == 2)
}
