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
/// arrives and kept up to `maxResponseBytes`: past that, the answer is the status with the first
/// `maxResponseBytes` bytes at once, and the rest is dropped as it arrives (a receiver cannot make
/// the client hold an unbounded body). No task is ever cancelled (a FoundationNetworking bug, see
/// `PosterDelegate`): a cancelled caller throws `CancellationError` at once and its request ends
/// unheard, by its answer or its timeout.
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
    // POST answers are never cached, no cookie is kept and no credential is used: skip the
    // look-ups on every request. The accept policy matters on its own: FoundationNetworking parses
    // every header line of every answer for Set-Cookie unless it is `.never`, storage or not (3 %
    // of a webhook POST's CPU). An ephemeral session has a credential store, consulted at the end
    // of each task.
    configuration.urlCache = nil
    configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
    configuration.httpCookieStorage = nil
    configuration.httpShouldSetCookies = false
    configuration.httpCookieAcceptPolicy = .never
    configuration.urlCredentialStorage = nil
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
      delegate.abandon(task)
    }
  }
}

/// The session's delegate: follows or refuses redirects, collects each task's answer up to the
/// limit and resumes its caller when the task completes.
///
/// A `URLSessionTask` is never cancelled: in this toolchain's FoundationNetworking (6.3.1,
/// swift-corelibs-foundation issue #5412) `cancel()` racing the task's completion can deadlock
/// (from a Swift cancellation handler, which holds the task's status-record lock) or crash ("a
/// task that is not in the registry"). A caller cancelled, or an answer past the limit, is resumed
/// at once; the request goes on unheard to its own end (its answer, or the request's timeout).
private final class PosterDelegate: NSObject, URLSessionDataDelegate, Sendable {
  private struct Pending {
    var continuation: CheckedContinuation<HTTPPostResponse, any Error>
    var started: ContinuousClock.Instant
    var status: Int?
    var body: [UInt8] = []
  }

  private let followRedirects: Bool
  private let maxResponseBytes: Int?
  private let pending = Mutex<[Int: Pending]>([:])

  init(followRedirects: Bool, maxResponseBytes: Int?) {
    self.followRedirects = followRedirects
    self.maxResponseBytes = maxResponseBytes
  }

  /// Registers the task's caller, then starts it (a caller cancelled already throws at once).
  func start(_ task: URLSessionDataTask, _ continuation: CheckedContinuation<HTTPPostResponse, any Error>) {
    if Task.isCancelled {
      continuation.resume(throwing: CancellationError())
      return
    }
    pending.withLock { $0[task.taskIdentifier] = Pending(continuation: continuation, started: .now) }
    task.resume()
  }

  /// The caller of `task` was cancelled: it throws `CancellationError` now, resumed from a
  /// Dispatch thread (this runs in the cancellation handler, under the task's status-record lock,
  /// which resuming takes); the request is not cancelled (see the type's notes).
  /// A caller cancelled before its task was registered finds it cancelled in ``start(_:_:)``; one
  /// cancelled in between gets its answer.
  func abandon(_ task: URLSessionDataTask) {
    guard let p = pending.withLock({ $0.removeValue(forKey: task.taskIdentifier) }) else { return }
    DispatchQueue.global().async { p.continuation.resume(throwing: CancellationError()) }
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
    // Past the limit the caller has its answer now: the status and the first bytes. The rest of
    // the body is dropped as it comes (nothing is pending for the task any more).
    let truncated = pending.withLock { tasks -> Pending? in
      guard var p = tasks[dataTask.taskIdentifier] else { return nil }
      if let limit = maxResponseBytes, p.body.count + data.count > limit {
        p.body += data.prefix(limit - p.body.count)
        tasks[dataTask.taskIdentifier] = nil
        return p
      }
      p.body += data
      tasks[dataTask.taskIdentifier] = p
      return nil
    }
    if let p = truncated {
      let status = p.status ?? (dataTask.response as? HTTPURLResponse)?.statusCode ?? 0
      p.continuation.resume(returning: HTTPPostResponse(status: status, body: p.body, duration: .now - p.started))
    }
  }

  func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
    guard let p = pending.withLock({ $0.removeValue(forKey: task.taskIdentifier) }) else { return }
    let status = p.status ?? (task.response as? HTTPURLResponse)?.statusCode
    if let status, error == nil {
      p.continuation.resume(returning: HTTPPostResponse(status: status, body: p.body, duration: .now - p.started))
    } else {
      p.continuation.resume(throwing: error ?? URLError(.badServerResponse))
    }
  }
}
