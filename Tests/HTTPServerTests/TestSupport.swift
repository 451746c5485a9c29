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
/// passes; returns what the server sent. The connection is opened on a Dispatch thread, and reads
/// wait there, not on the cooperative pool (which has one thread per core, and the handlers need it).
func rawExchange(port: Int, _ bytes: [UInt8], timeout: Duration = .seconds(5)) async throws -> String {
  let connection = try await connected(port: port, count: 1, sending: bytes)[0]
  defer { connection.close() }
  var received: [UInt8] = []
  let end = ContinuousClock.now + timeout
  while ContinuousClock.now < end {
    let chunk = await connection.read(timeout: end - ContinuousClock.now)
    if chunk.isEmpty { break }
    received += chunk
  }
  return String(decoding: received, as: UTF8.self)
}

/// Opens `count` connections to `port` that each send `bytes`, on a Dispatch thread (a connect
/// waits while the server's backlog is full).
func connected(port: Int, count: Int, sending bytes: [UInt8]) async throws -> [RawConnection] {
  try await withCheckedThrowingContinuation { continuation in
    DispatchQueue.global().async {
      continuation.resume(
        with: Result {
          try (0..<count).map { _ in
            let connection = try RawConnection(port: port)
            connection.send(bytes)
            return connection
          }
        })
    }
  }
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
  let connections = try await connected(port: port, count: count, sending: bytes)
  defer { for connection in connections { connection.close() } }
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

