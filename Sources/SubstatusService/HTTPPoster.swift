import Foundation
import Synchronization

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// What an HTTP POST answered.
public struct HTTPPostResponse: Sendable {
  /// The status code.
  public var status: Int
  /// The body (at most the poster's limit, see ``URLSessionPoster/init(followRedirects:maxConnectionsPerHost:maxResponseBytes:)``).
  public var body: [UInt8]
  /// How long the request took, from sending to the whole answer (wall time of the I/O).
  public var duration: Duration

  /// Creates a response.
  public init(status: Int, body: [UInt8], duration: Duration = .zero) {
    self.status = status
    self.body = body
    self.duration = duration
  }
}

/// Sends HTTP POST requests: the service's outbound HTTP to Apple and to webhooks, replaceable in
/// tests.
public protocol HTTPPoster: Sendable {
  /// Posts a body with `headers` (the caller sets `Content-Type`) and returns the answer.
  /// - Throws: On connection failure or timeout (`URLError` from ``URLSessionPoster``).
  func post(url: URL, headers: [(String, String)], body: [UInt8], timeout: Duration) async throws
    -> HTTPPostResponse
}

extension HTTPPoster {
  /// Posts a JSON body and returns the status code and body.
  /// - Throws: On connection failure or timeout.
  public func post(url: URL, body: [UInt8], timeout: Duration) async throws -> (status: Int, body: [UInt8]) {
    let response = try await post(
      url: url, headers: [("Content-Type", "application/json")], body: body, timeout: timeout)
    return (response.status, response.body)
  }
}

/// `HTTPPoster` over FoundationNetworking's `URLSession` (libcurl inside the toolchain).
///
/// Connections are kept alive and reused between requests to the same host (libcurl's connection
/// cache of the session), at most `maxConnectionsPerHost` at once; no response cache, no cookies. The answer's body is read as it
/// arrives and kept up to `maxResponseBytes`: past that, the request is cancelled and the answer is
/// the status with the first `maxResponseBytes` bytes (a receiver cannot make the client hold an
/// unbounded body).
///
/// libcurl takes its proxy from the environment at each new connection, for every session of the
/// process: once a ``WebhookDispatcher`` has installed the ``WebhookTunnelProxy`` (`https_proxy`),
/// every `https://` connection of this poster goes through it, and to an address its
/// ``WebhookURLPolicy`` allows (TLS stays end to end).
public struct URLSessionPoster: HTTPPoster {
  private let session: URLSession
  private let delegate: PosterDelegate

  /// A poster with an ephemeral session (no cookies, no cache).
  /// - Parameters:
  ///   - followRedirects: whether a 3xx answer is followed (Apple's endpoints); webhooks pass
  ///     `false`, so a receiver cannot send the request on to an address the URL policy refuses,
  ///     and the 3xx is the answer.
  ///   - maxConnectionsPerHost: connections kept per host.
  ///   - maxResponseBytes: the most of an answer's body kept; `nil`: all of it (Apple's answers).
  public init(followRedirects: Bool = true, maxConnectionsPerHost: Int = 16, maxResponseBytes: Int? = nil) {
    let configuration = URLSessionConfiguration.ephemeral
    configuration.httpMaximumConnectionsPerHost = maxConnectionsPerHost
    // POST answers are never cached and no cookie is kept: skip both look-ups on every request.
    configuration.urlCache = nil
    configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
    configuration.httpCookieStorage = nil
    configuration.httpShouldSetCookies = false
    delegate = PosterDelegate(followRedirects: followRedirects, maxResponseBytes: maxResponseBytes.map { max(0, $0) })
    session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
  }

  /// See ``HTTPPoster/post(url:headers:body:timeout:)``.
  public func post(url: URL, headers: [(String, String)], body: [UInt8], timeout: Duration) async throws
    -> HTTPPostResponse
  {
    var request = URLRequest(url: url)
    request.httpMethod = "POST"
    request.httpBody = Data(body)
    for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
    request.timeoutInterval = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
    let task = session.dataTask(with: request)
    let delegate = self.delegate
    return try await withTaskCancellationHandler {
      try await withCheckedThrowingContinuation { continuation in
        delegate.start(task, continuation)
      }
    } onCancel: {
      task.cancel()
    }
  }
}

/// The session's delegate: follows or refuses redirects, collects each task's answer up to the
/// limit and resumes its caller when the task completes.
private final class PosterDelegate: NSObject, URLSessionDataDelegate, Sendable {
  private struct Pending {
    var continuation: CheckedContinuation<HTTPPostResponse, any Error>
    var started: ContinuousClock.Instant
    var status: Int?
    var body: [UInt8] = []
    /// The body passed the limit: the task was cancelled, the answer is what was kept.
    var truncated = false
  }

  private let followRedirects: Bool
  private let maxResponseBytes: Int?
  private let pending = Mutex<[Int: Pending]>([:])

  init(followRedirects: Bool, maxResponseBytes: Int?) {
    self.followRedirects = followRedirects
    self.maxResponseBytes = maxResponseBytes
  }

  /// Registers the task's caller, then starts it.
  func start(_ task: URLSessionDataTask, _ continuation: CheckedContinuation<HTTPPostResponse, any Error>) {
    pending.withLock { $0[task.taskIdentifier] = Pending(continuation: continuation, started: .now) }
    task.resume()
  }

  func urlSession(
    _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
    newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
  ) {
    // Not followed: the 3xx response is the answer.
    completionHandler(followRedirects ? request : nil)
  }

  func urlSession(
    _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
    completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
  ) {
    let status = (response as? HTTPURLResponse)?.statusCode ?? 0
    pending.withLock { $0[dataTask.taskIdentifier]?.status = status }
    completionHandler(.allow)
  }

  func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
    let cancel = pending.withLock { tasks -> Bool in
      guard var p = tasks[dataTask.taskIdentifier], !p.truncated else { return false }
      if let limit = maxResponseBytes, p.body.count + data.count > limit {
        p.body += data.prefix(limit - p.body.count)
        p.truncated = true
      } else {
        p.body += data
      }
      tasks[dataTask.taskIdentifier] = p
      return p.truncated
    }
    if cancel { dataTask.cancel() }
  }

  func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
    guard let p = pending.withLock({ $0.removeValue(forKey: task.taskIdentifier) }) else { return }
    let status = p.status ?? (task.response as? HTTPURLResponse)?.statusCode
    if let status, error == nil || p.truncated {
      p.continuation.resume(returning: HTTPPostResponse(status: status, body: p.body, duration: .now - p.started))
    } else {
      p.continuation.resume(throwing: error ?? URLError(.badServerResponse))
    }
  }
}
