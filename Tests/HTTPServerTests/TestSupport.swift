import Dispatch
import Foundation
import HTTPServer
import HTTPTestSupport
import Synchronization

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif
#if canImport(Glibc)
  import Glibc
#endif

/// A URLSession for tests: no caches, no cookies, bounded timeouts.
let testSession: URLSession = {
  let configuration = URLSessionConfiguration.ephemeral
  configuration.timeoutIntervalForRequest = 20
  configuration.httpMaximumConnectionsPerHost = 64
  return URLSession(configuration: configuration)
}()

struct TestResponse {
  var status: Int
  var headers: [String: String]
  var body: Data
  var text: String { String(decoding: body, as: UTF8.self) }
  func json() throws -> [String: Any] {
    try JSONSerialization.jsonObject(with: body) as? [String: Any] ?? [:]
  }
}

func send(
  _ method: String, _ server: HTTPServer, _ pathAndQuery: String, body: Data? = nil,
  headers: [String: String] = [:]
) async throws -> TestResponse {
  var request = URLRequest(url: URL(string: "http://\(server.address)\(pathAndQuery)")!)
  request.httpMethod = method
  request.httpBody = body
  for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
  let (data, response) = try await testSession.data(for: request)
  let http = response as! HTTPURLResponse
  var fields: [String: String] = [:]
  for (name, value) in http.allHeaderFields {
    fields[String(describing: name).lowercased()] = String(describing: value)
  }
  return TestResponse(status: http.statusCode, headers: fields, body: data)
}

/// Writes `bytes` to a fresh TCP connection and reads until the server closes or `timeout`
/// passes; returns what the server sent. The blocking socket calls run on a Dispatch thread, not
/// on the cooperative pool (which has one thread per core, and the handlers need it).
func rawExchange(port: Int, _ bytes: [UInt8], timeout: Duration = .seconds(5)) async throws -> String {
  try await withCheckedThrowingContinuation { continuation in
    DispatchQueue.global().async {
      continuation.resume(with: Result { try blockingExchange(port: port, bytes, timeout: timeout) })
    }
  }
}

private func blockingExchange(port: Int, _ bytes: [UInt8], timeout: Duration) throws -> String {
  let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
  precondition(fd >= 0)
  defer { close(fd) }
  var address = sockaddr_in()
  address.sin_family = sa_family_t(AF_INET)
  address.sin_port = in_port_t(UInt16(port).bigEndian)
  address.sin_addr.s_addr = inet_addr("127.0.0.1")
  let connected = withUnsafePointer(to: &address) {
    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
      connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
    }
  }
  guard connected == 0 else { throw POSIXError(.ECONNREFUSED) }
  let micros = timeout.components.seconds * 1_000_000 + timeout.components.attoseconds / 1_000_000_000_000
  var tv = timeval(tv_sec: Int(micros / 1_000_000), tv_usec: Int(micros % 1_000_000))
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
  _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
  var received: [UInt8] = []
  var buffer = [UInt8](repeating: 0, count: 4096)
  while true {
    let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
    if n <= 0 { break }
    received.append(contentsOf: buffer[0..<n])
  }
  return String(decoding: received, as: UTF8.self)
}

/// A counter shared between a handler and its test.
final class Counter: Sendable {
  private let mutex = Mutex<Int>(0)
  func increment() { mutex.withLock { $0 += 1 } }
  var value: Int { mutex.withLock { $0 } }
}

/// Opens `count` connections to `port` that send `bytes` and then hold still, runs `body`, and
/// closes them. Socket calls run on a Dispatch thread, not on the cooperative pool.
func withHeldConnections<T: Sendable>(
  port: Int, count: Int, sending bytes: [UInt8], _ body: () async throws -> T
) async throws -> T {
  let fds = await withCheckedContinuation { continuation in
    DispatchQueue.global().async {
      var fds: [Int32] = []
      for _ in 0..<count {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        _ = withUnsafePointer(to: &address) {
          $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        fds.append(fd)
      }
      continuation.resume(returning: fds)
    }
  }
  defer { for fd in fds { close(fd) } }
  return try await body()
}

/// The Python of the worktree's `.venv` (made by `scripts/install-deps --test`).
let python: String = {
  let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()
  return root.appendingPathComponent(".venv/bin/python").path
}()

/// A fixture file's path.
func fixture(_ name: String) -> String {
  Bundle.module.url(forResource: "Fixtures/\(name)", withExtension: nil)!.path
}

