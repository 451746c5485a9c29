import Foundation
import HTTPServer
import Synchronization
import Testing

@testable import SubstatusService

#if canImport(Glibc)
  import Glibc
#endif

/// Runs blocking socket work on a thread of its own (never on Swift's cooperative pool).
func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
  try await withCheckedThrowingContinuation { continuation in
    Thread { continuation.resume(with: Result { try body() }) }.start()
  }
}

/// Runs a program off the cooperative pool; its exit status and its stdout and stderr together.
func runProgram(_ path: String, _ arguments: [String], environment: [String: String]? = nil) async throws
  -> (status: Int32, output: String)
{
  try await offPool {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    if let environment { process.environment = environment }
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    try process.run()
    let output = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: output, as: UTF8.self))
  }
}

/// A new empty directory for a test's certificate.
func tlsTestDirectory() throws -> URL {
  let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tunnel-tls-\(UUID().uuidString)")
  try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
  return directory
}

/// A self-signed certificate for `localhost` (trusted by nobody unless a test makes it so) and its
/// key, made by openssl in `directory` (`cert.pem`, `key.pem`) unless there already.
func selfSignedTLS(in directory: URL) async throws -> HTTPServerTLS {
  let (cert, key) = (directory.appendingPathComponent("cert.pem").path, directory.appendingPathComponent("key.pem").path)
  if !FileManager.default.fileExists(atPath: cert) {
    let made = try await runProgram(
      "/usr/bin/openssl",
      [
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
        "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost", "-keyout", key, "-out", cert,
      ])
    guard made.status == 0 else { throw SocketFailure(description: "openssl: \(made.output)") }
  }
  return HTTPServerTLS(
    certificateChainPEM: try String(contentsOfFile: cert, encoding: .utf8),
    privateKeyPEM: try String(contentsOfFile: key, encoding: .utf8))
}

struct SocketFailure: Error, CustomStringConvertible {
  var description: String
}

/// A blocking TCP client socket to 127.0.0.1 for the tests, closed on deinit.
final class TestSocket: Sendable {
  let fd: Int32

  init(port: Int) throws {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    self.fd = fd
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = in_addr_t(0x7f00_0001).bigEndian
    address.sin_port = UInt16(port).bigEndian
    let rc = withUnsafePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard rc == 0 else {
      close(fd)
      throw SocketFailure(description: "connect: \(String(cString: strerror(errno)))")
    }
    var timeout = timeval(tv_sec: 5, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
  }

  deinit { close(fd) }

  func send(_ text: String) {
    let bytes = Array(text.utf8)
    _ = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
  }

  /// Reads until `marker` is seen, the peer closes or 5 s pass.
  func read(until marker: String? = nil) -> String {
    var received: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 4096)
    while marker.map({ !String(decoding: received, as: UTF8.self).contains($0) }) ?? true {
      let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
      guard n > 0 else { break }
      received += chunk[0..<n]
    }
    return String(decoding: received, as: UTF8.self)
  }
}

/// A TCP listener on 127.0.0.1 (port 0) that counts connections and echoes what it receives.
final class EchoListener: Sendable {
  let port: Int
  private let fd: Int32
  private final class Count: Sendable { let value = Atomic<Int>(0) }
  private let accepted = Count()

  init() throws {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    self.fd = fd
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = in_addr_t(0x7f00_0001).bigEndian
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let ok = withUnsafeMutablePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        bind(fd, $0, length) == 0 && listen(fd, 16) == 0 && getsockname(fd, $0, &length) == 0
      }
    }
    guard ok else { throw SocketFailure(description: "listen: \(String(cString: strerror(errno)))") }
    port = Int(UInt16(bigEndian: address.sin_port))
    let (listener, accepted) = (fd, accepted)
    // The accept thread closes the listener when `deinit`'s shutdown wakes it: closed by
    // `deinit`, its number could be reused by another test's listener (tests run in parallel)
    // before this thread's next accept, which would then take that listener's connections.
    Thread {
      while true {
        let client = accept(listener, nil, nil)
        guard client >= 0 else {
          close(listener)
          return
        }
        accepted.value.add(1, ordering: .relaxed)
        Thread {
          var buffer = [UInt8](repeating: 0, count: 4096)
          while true {
            let n = buffer.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, 0) }
            guard n > 0 else { break }
            _ = buffer.withUnsafeBytes { send(client, $0.baseAddress, n, Int32(MSG_NOSIGNAL)) }
          }
          close(client)
        }.start()
      }
    }.start()
  }

  /// Connections accepted so far.
  var connections: Int { accepted.value.load(ordering: .relaxed) }

  deinit { shutdown(fd, Int32(SHUT_RDWR)) }
}

/// The CONNECT proxy on its own (not installed in the environment), over raw sockets.
@Suite("Webhook tunnel proxy")
struct WebhookTunnelProxyTests {
  /// Answers a fixed list of addresses for every name, and counts its lookups.
  final class ListResolver: WebhookAddressResolver {
    let answers: [[WebhookIPAddress]]
    let lookups = Atomic<Int>(0)

    /// One answer per lookup, in order; the last is repeated.
    init(_ answers: [[String]]) { self.answers = answers.map { $0.map { WebhookIPAddress($0)! } } }

    func addresses(of host: String) async throws(WebhookURLRejection) -> [WebhookIPAddress] {
      let n = lookups.add(1, ordering: .relaxed).oldValue
      return answers[min(n, answers.count - 1)]
    }
  }

  private static func authorization(_ proxy: WebhookTunnelProxy) -> String {
    let credentials = URLComponents(string: proxy.proxyURL).map { "\($0.user ?? ""):\($0.password ?? "")" } ?? ""
    return "Proxy-Authorization: Basic \(Data(credentials.utf8).base64EncodedString())\r\n"
  }

  @Test(
    "only an authorized CONNECT is served",
    arguments: [
      ("GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n", "HTTP/1.1 405 "),
      ("CONNECT localhost:PORT HTTP/1.1\r\nHost: localhost:PORT\r\n\r\n", "HTTP/1.1 407 "),
      (
        "CONNECT localhost:PORT HTTP/1.1\r\nProxy-Authorization: Basic c3Vic3RhdHVzOndyb25n\r\n\r\n",
        "HTTP/1.1 407 "
      ),
      ("CONNECT localhost HTTP/1.1\r\nAUTH\r\n", "HTTP/1.1 400 "),
    ])
  func refusesWhatIsNotAnAuthorizedConnect(request: String, expected: String) async throws {
    let target = try EchoListener()
    let proxy = try WebhookTunnelProxy(fallbackPolicy: WebhookURLPolicy(allowPrivateAddresses: true))
    defer { proxy.stop() }
    let text = request.replacingOccurrences(of: "PORT", with: "\(target.port)")
      .replacingOccurrences(of: "AUTH\r\n", with: Self.authorization(proxy) + "\r\n")
    let answer = try await offPool {
      let socket = try TestSocket(port: proxy.port)
      socket.send(text)
      return socket.read()
    }
    #expect(answer.hasPrefix(expected), "\(answer)")
    #expect(target.connections == 0)
    #expect(proxy.counts == WebhookTunnelProxy.Counts(badRequests: 1))
    #expect(proxy.prometheusText().contains("substatus_webhook_tunnel_connects_total{outcome=\"bad_request\"} 1\n"))
  }

  @Test("a CONNECT to a registered host is checked with its POST's resolver and policy: refused, nothing connects")
  func registeredHostRefused() async throws {
    let target = try EchoListener()
    let proxy = try WebhookTunnelProxy(fallbackPolicy: WebhookURLPolicy(allowPrivateAddresses: true))
    defer { proxy.stop() }
    let resolver = ListResolver([["127.0.0.1"]])
    let grant = proxy.expect(
      host: "Hooks.Example.Invalid.", port: target.port, policy: WebhookURLPolicy(), resolver: resolver)
    let request = "CONNECT hooks.example.invalid:\(target.port) HTTP/1.1\r\n\(Self.authorization(proxy))\r\n"
    let answer = try await offPool {
      let socket = try TestSocket(port: proxy.port)
      socket.send(request)
      return socket.read()
    }
    #expect(answer.hasPrefix("HTTP/1.1 403 "), "\(answer)")
    #expect(answer.contains("the address 127.0.0.1 is loopback"))
    #expect(grant.refusal?.hasPrefix("the address 127.0.0.1 is loopback") == true)
    #expect(resolver.lookups.load(ordering: .relaxed) == 1)
    #expect(target.connections == 0)
    #expect(proxy.counts == WebhookTunnelProxy.Counts(refusedAddress: 1))
    proxy.release(grant)
  }

  @Test("an allowed CONNECT is tunnelled both ways to the checked address, and a second lookup is not used")
  func tunnelsToTheCheckedAddress() async throws {
    let target = try EchoListener()
    let proxy = try WebhookTunnelProxy(fallbackPolicy: WebhookURLPolicy())
    defer { proxy.stop() }
    // The first answer is the one connected to; a later one (a private address) is never seen.
    let resolver = ListResolver([["127.0.0.1"], ["10.0.0.1"]])
    let grant = proxy.expect(
      host: "hooks.example.invalid", port: target.port, policy: WebhookURLPolicy(allowPrivateAddresses: true),
      resolver: resolver)
    defer { proxy.release(grant) }
    let request = "CONNECT hooks.example.invalid:\(target.port) HTTP/1.1\r\n\(Self.authorization(proxy))\r\n"
    let (head, echo) = try await offPool {
      let socket = try TestSocket(port: proxy.port)
      socket.send(request)
      let head = socket.read(until: "\r\n\r\n")
      socket.send("ping through the tunnel")
      return (head, socket.read(until: "tunnel"))
    }
    #expect(head == "HTTP/1.1 200 Connection established\r\n\r\n")
    #expect(echo == "ping through the tunnel")
    #expect(target.connections == 1)
    #expect(resolver.lookups.load(ordering: .relaxed) == 1)
    #expect(grant.refusal == nil)
    #expect(proxy.counts == WebhookTunnelProxy.Counts(established: 1))
    #expect(proxy.prometheusText().contains("substatus_webhook_tunnels_limit 256\n"))
  }

  @Test("a CONNECT no POST registered is checked by the fallback policy and the system resolver")
  func unregisteredUsesTheFallbackPolicy() async throws {
    let target = try EchoListener()
    let proxy = try WebhookTunnelProxy(fallbackPolicy: WebhookURLPolicy())
    defer { proxy.stop() }
    let request = "CONNECT 127.0.0.1:\(target.port) HTTP/1.1\r\n\(Self.authorization(proxy))\r\n"
    let answer = try await offPool {
      let socket = try TestSocket(port: proxy.port)
      socket.send(request)
      return socket.read()
    }
    #expect(answer.hasPrefix("HTTP/1.1 403 "), "\(answer)")
    #expect(target.connections == 0)
  }

  @Test("tunnels are bounded: past the limit a CONNECT gets 503; an idle tunnel is closed")
  func bounded() async throws {
    let target = try EchoListener()
    let proxy = try WebhookTunnelProxy(
      fallbackPolicy: WebhookURLPolicy(allowPrivateAddresses: true),
      limits: .init(idleTimeout: .milliseconds(300), maxTunnels: 1))
    defer { proxy.stop() }
    let request = "CONNECT 127.0.0.1:\(target.port) HTTP/1.1\r\n\(Self.authorization(proxy))\r\n"
    let (first, second, afterIdle) = try await offPool {
      let one = try TestSocket(port: proxy.port)
      one.send(request)
      let first = one.read(until: "\r\n\r\n")
      let two = try TestSocket(port: proxy.port)
      two.send(request)
      let second = two.read()
      // Nothing moves in the first tunnel: the proxy closes it (the read ends well before 5 s).
      let started = ContinuousClock.now
      let rest = one.read()
      return (first, second, (rest, ContinuousClock.now - started))
    }
    #expect(first.hasPrefix("HTTP/1.1 200 "), "\(first)")
    #expect(second.hasPrefix("HTTP/1.1 503 "), "\(second)")
    #expect(proxy.counts == WebhookTunnelProxy.Counts(established: 1, refusedAtCap: 1))
    #expect(afterIdle.0.isEmpty)
    #expect(afterIdle.1 < .seconds(3))
  }

  @Test("libcurl (curl, as URLSession) through the proxy from https_proxy: TLS end to end, the certificate checked for the URL's name")
  func curlThroughTheTunnelVerifiesTheCertificate() async throws {
    guard HTTPServerTLS.isSupported else { return }
    let directory = try tlsTestDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let cert = directory.appendingPathComponent("cert.pem").path
    var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0)
    configuration.tls = try await selfSignedTLS(in: directory)
    let server = try HTTPServer(configuration: configuration) { request in
      HTTPResponse(status: 200, body: Array("host \(request.headers["host"] ?? "")".utf8))
    }
    let proxy = try WebhookTunnelProxy(fallbackPolicy: WebhookURLPolicy())
    defer { proxy.stop() }
    let resolver = ListResolver([["127.0.0.1"]])
    let grant = proxy.expect(
      host: "localhost", port: server.port, policy: WebhookURLPolicy(allowPrivateAddresses: true), resolver: resolver)
    defer { proxy.release(grant) }
    let environment = ["https_proxy": proxy.proxyURL, "PATH": "/usr/bin:/bin"]
    let trusted = try await runProgram(
      "/usr/bin/curl", ["-sS", "--cacert", cert, "-d", "{}", "https://localhost:\(server.port)/hook"], environment: environment)
    #expect(trusted.status == 0, "\(trusted.output)")
    #expect(trusted.output == "host localhost:\(server.port)")
    #expect(resolver.lookups.load(ordering: .relaxed) == 1)
    // Through the tunnel too, but the certificate is not for the name asked for: libcurl refuses it.
    let literal = proxy.expect(
      host: "127.0.0.1", port: server.port, policy: WebhookURLPolicy(allowPrivateAddresses: true), resolver: resolver)
    defer { proxy.release(literal) }
    let wrongName = try await runProgram(
      "/usr/bin/curl", ["-sS", "--cacert", cert, "-d", "{}", "https://127.0.0.1:\(server.port)/hook"],
      environment: environment)
    #expect(wrongName.status == 60, "\(wrongName.output)")
    #expect(literal.refusal == nil && literal.failure == nil)
    await server.stop(gracePeriod: .seconds(1))
  }
}
