import Foundation
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

// The `https://` half of webhook address pinning (DESIGN.md "Events out"). An `http://` webhook POST
// is sent to the address the URL policy checked; an `https://` one cannot be, because URLSession
// takes the host name from the URL for SNI and the certificate check, and on Linux offers no way to
// hand libcurl an address (no `CURLOPT_RESOLVE`/`CURLOPT_CONNECT_TO`; swift-corelibs-foundation
// 6.3.1 stores `connectionProxyDictionary` but never gives it to libcurl, see the "TODO: Proxy
// setting" in its `EasyHandle.swift`). What libcurl does honour is the `https_proxy` environment
// variable, read at each new connection: so the process's HTTPS goes through this CONNECT proxy on
// 127.0.0.1, which resolves the host once, checks every address with the URL policy and connects to
// a checked one. TLS stays end to end between libcurl and the receiver (the proxy moves bytes), so
// the certificate is still verified against the URL's host name and SNI is that name.

/// Why the tunnel proxy could not be set up (the dispatcher then connects `https://` by name).
public struct WebhookTunnelProxyError: Error, Sendable, CustomStringConvertible {
  /// What went wrong.
  public var description: String
  /// Creates an error.
  public init(_ description: String) { self.description = description }
}

/// A CONNECT proxy on 127.0.0.1 through which libcurl (URLSession) opens the process's `https://`
/// connections, so that a webhook's connection goes to an address the ``WebhookURLPolicy`` checked.
///
/// - Only `CONNECT host:port` is served, only with this proxy's `Proxy-Authorization` (a random
///   token made at start, known to this process only: it is in the process's environment), on
///   127.0.0.1 only; anything else gets 405, 407 or 400 and is closed.
/// - A webhook POST registers its host and port first (``expect(host:port:policy:resolver:)``): a
///   CONNECT to them is resolved with that POST's resolver and policy; a refused address answers
///   403, a failed lookup or connection 502, and the reason is kept on the ``Grant`` (the attempt's
///   error names the policy or the failure). Any other CONNECT (Apple's endpoints) is resolved by
///   the system resolver and checked by the proxy's `fallbackPolicy`.
/// - Every address is checked before any connection; then the addresses are tried in order, each
///   within ``Limits-swift.struct/connectTimeout``; once connected, bytes are moved both ways until
///   both sides close or nothing moves for ``Limits-swift.struct/idleTimeout``.
/// - At most ``Limits-swift.struct/maxTunnels`` connections at once (each on a thread of its own:
///   blocking I/O, never on Swift's cooperative pool); past that a CONNECT gets 503.
///
/// ```swift
/// let proxy = try WebhookTunnelProxy.installProcessWide(fallbackPolicy: policy).get()
/// let grant = proxy.expect(host: "hooks.example.com", port: 443, policy: policy, resolver: resolver)
/// defer { proxy.release(grant) }
/// // ... POST https://hooks.example.com/ with URLSession; grant.refusal says why a CONNECT was refused
/// ```
public final class WebhookTunnelProxy: Sendable {
  /// The proxy's bounds.
  public struct Limits: Sendable {
    /// How long a client has to send its CONNECT request head, and how long the host's lookup may take.
    public var requestTimeout: Duration
    /// How long one connection attempt to the receiver may take.
    public var connectTimeout: Duration
    /// A tunnel in which no byte moves for this long is closed.
    public var idleTimeout: Duration
    /// Tunnels open at once (including those being set up).
    public var maxTunnels: Int

    /// Creates limits.
    public init(
      requestTimeout: Duration = .seconds(10), connectTimeout: Duration = .seconds(10),
      idleTimeout: Duration = .seconds(120), maxTunnels: Int = 256
    ) {
      self.requestTimeout = requestTimeout
      self.connectTimeout = connectTimeout
      self.idleTimeout = idleTimeout
      self.maxTunnels = max(1, maxTunnels)
    }
  }

  /// A webhook POST in flight to a host and port: how the proxy checks CONNECTs to them, and what
  /// it refused.
  public final class Grant: Sendable {
    fileprivate let key: String
    fileprivate let id: Int
    fileprivate let policy: WebhookURLPolicy
    fileprivate let resolver: any WebhookAddressResolver
    private let outcome = Mutex<(refusal: String?, failure: String?)>((nil, nil))

    fileprivate init(key: String, id: Int, policy: WebhookURLPolicy, resolver: any WebhookAddressResolver) {
      self.key = key
      self.id = id
      self.policy = policy
      self.resolver = resolver
    }

    /// Why the proxy refused a CONNECT for this POST: an address the policy refuses, or `nil`.
    public var refusal: String? { outcome.withLock { $0.refusal } }

    /// Why a CONNECT for this POST failed otherwise (the lookup, the connection), or `nil`.
    public var failure: String? { outcome.withLock { $0.failure } }

    fileprivate func record(refusal: String?, failure: String?) {
      outcome.withLock { $0 = (refusal, failure) }
    }
  }

  private struct State {
    var grants: [String: [Grant]] = [:]
    var nextGrant = 0
    var tunnels = 0
    var stopped = false
    var counts = Counts()
  }

  /// What the proxy did since it started (``counts``, `/metrics`).
  public struct Counts: Sendable, Equatable {
    /// Tunnels established (CONNECT answered 200).
    public var established = 0
    /// CONNECTs refused because the policy refuses an address of the host (403).
    public var refusedAddress = 0
    /// CONNECTs whose lookup or connection failed (502).
    public var failed = 0
    /// Connections refused at ``Limits-swift.struct/maxTunnels`` (503).
    public var refusedAtCap = 0
    /// Connections that were not an authorized `CONNECT host:port` (400, 405, 407).
    public var badRequests = 0
  }

  /// The port it listens on (127.0.0.1).
  public let port: Int
  /// The limits.
  public let limits: Limits
  private let token: String
  private let fallbackPolicy: WebhookURLPolicy
  private let listener: Int32
  private let state = Mutex(State())

  /// Starts a proxy on 127.0.0.1, port 0 (it does not change the environment; see
  /// ``installProcessWide(fallbackPolicy:)``).
  /// - Parameters:
  ///   - fallbackPolicy: checks CONNECTs that no ``Grant`` covers.
  ///   - limits: the timeouts and the most tunnels at once.
  /// - Throws: ``WebhookTunnelProxyError`` when the socket cannot be bound.
  public init(fallbackPolicy: WebhookURLPolicy, limits: Limits = .init()) throws(WebhookTunnelProxyError) {
    var generator = SystemRandomNumberGenerator()
    token = (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
    self.fallbackPolicy = fallbackPolicy
    self.limits = limits
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { throw WebhookTunnelProxyError("socket: \(Self.errnoText())") }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = in_addr_t(0x7f00_0001).bigEndian
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { p in
      p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
        bind(fd, sa, length) == 0 && listen(fd, 128) == 0 && getsockname(fd, sa, &length) == 0
      }
    }
    guard bound else {
      let text = Self.errnoText()
      close(fd)
      throw WebhookTunnelProxyError("cannot listen on 127.0.0.1: \(text)")
    }
    listener = fd
    port = Int(UInt16(bigEndian: address.sin_port))
    let thread = Thread { [self] in acceptLoop() }
    thread.name = "webhook-tunnel-accept"
    thread.start()
  }

  /// The proxy URL libcurl is given: `http://substatus:<token>@127.0.0.1:<port>` (a secret: it is
  /// never logged).
  public var proxyURL: String { "http://substatus:\(token)@127.0.0.1:\(port)" }

  /// The environment variables through which libcurl would reach another proxy or none: while one
  /// of them is set, the process-wide proxy is not installed.
  public static let proxyEnvironment = ["https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"]

  private static let processWide = Mutex<Result<WebhookTunnelProxy, WebhookTunnelProxyError>?>(nil)

  /// The process's proxy, started and set as libcurl's `https_proxy` (`setenv`) on the first call;
  /// later calls return the same one (their `fallbackPolicy` is ignored). Every `https://`
  /// connection of the process's URLSessions goes through it from then on.
  /// - Returns: the proxy, or why there is none: the environment already names a proxy or a
  ///   `no_proxy` list (``proxyEnvironment``; libcurl would not, or not always, come to this one)
  ///   or the socket could not be bound.
  public static func installProcessWide(fallbackPolicy: WebhookURLPolicy) -> Result<
    WebhookTunnelProxy, WebhookTunnelProxyError
  > {
    processWide.withLock { installed in
      if let installed { return installed }
      let result: Result<WebhookTunnelProxy, WebhookTunnelProxyError>
      if let name = proxyEnvironment.first(where: { getenv($0) != nil }) {
        result = .failure(WebhookTunnelProxyError("the environment sets \(name), so libcurl's proxy is the operator's"))
      } else {
        do throws(WebhookTunnelProxyError) {
          let proxy = try WebhookTunnelProxy(fallbackPolicy: fallbackPolicy)
          // Set once, never changed or removed: libcurl reads it at each new connection.
          setenv("https_proxy", proxy.proxyURL, 1)
          result = .success(proxy)
        } catch {
          result = .failure(error)
        }
      }
      installed = result
      return result
    }
  }

  /// Registers a POST about to be sent to `host`:`port`: until ``release(_:)``, a CONNECT to them is
  /// resolved by `resolver` and checked by `policy` (the strictest policy when several POSTs
  /// registered the same host and port).
  public func expect(
    host: String, port: Int, policy: WebhookURLPolicy, resolver: any WebhookAddressResolver
  ) -> Grant {
    let key = Self.key(host: host, port: port)
    return state.withLock { s in
      s.nextGrant += 1
      let grant = Grant(key: key, id: s.nextGrant, policy: policy, resolver: resolver)
      s.grants[key, default: []].append(grant)
      return grant
    }
  }

  /// Ends a registration made by ``expect(host:port:policy:resolver:)``.
  public func release(_ grant: Grant) {
    state.withLock { s in
      s.grants[grant.key]?.removeAll { $0.id == grant.id }
      if s.grants[grant.key]?.isEmpty == true { s.grants[grant.key] = nil }
    }
  }

  /// Tunnels open now (tests, metrics).
  public var openTunnels: Int { state.withLock { $0.tunnels } }

  /// What the proxy did since it started.
  public var counts: Counts { state.withLock { $0.counts } }

  /// The counts and the tunnels open, in the Prometheus text format.
  public func prometheusText() -> String {
    let (open, c) = state.withLock { ($0.tunnels, $0.counts) }
    var out = """
      # HELP substatus_webhook_tunnels_open Connections open through the https:// webhook tunnel proxy (its cap: substatus_webhook_tunnels_limit).
      # TYPE substatus_webhook_tunnels_open gauge
      substatus_webhook_tunnels_open \(open)
      # HELP substatus_webhook_tunnels_limit The most connections the tunnel proxy holds at once.
      # TYPE substatus_webhook_tunnels_limit gauge
      substatus_webhook_tunnels_limit \(limits.maxTunnels)
      # HELP substatus_webhook_tunnel_connects_total CONNECT requests to the tunnel proxy by outcome.
      # TYPE substatus_webhook_tunnel_connects_total counter

      """
    for (outcome, count) in [
      ("established", c.established), ("refused_address", c.refusedAddress), ("failed", c.failed),
      ("refused_at_cap", c.refusedAtCap), ("bad_request", c.badRequests),
    ] {
      out += "substatus_webhook_tunnel_connects_total{outcome=\"\(outcome)\"} \(count)\n"
    }
    return out
  }

  /// Stops accepting connections (tunnels open run to their end). The process-wide proxy is never
  /// stopped: the environment keeps naming it.
  public func stop() {
    let first = state.withLock { s -> Bool in
      defer { s.stopped = true }
      return !s.stopped
    }
    if first { shutdown(listener, Int32(SHUT_RDWR)) }
  }

  /// Host names compare without case, brackets or a trailing dot, as libcurl sends them.
  static func key(host: String, port: Int) -> String {
    var h = Substring(host.lowercased())
    if h.hasPrefix("["), h.hasSuffix("]") { h = h.dropFirst().dropLast() }
    while h.hasSuffix(".") { h = h.dropLast() }
    return "\(h) \(port)"
  }

  // MARK: Connections

  private func acceptLoop() {
    while true {
      let fd = accept(listener, nil, nil)
      if fd < 0 {
        if state.withLock({ $0.stopped }) { break }
        if errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM { usleep(10_000) }
        continue
      }
      _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
      Self.setNoDelay(fd)
      let admitted = state.withLock { s -> Bool in
        guard s.tunnels < limits.maxTunnels else { return false }
        s.tunnels += 1
        return true
      }
      guard admitted else {
        state.withLock { $0.counts.refusedAtCap += 1 }
        Self.answer(fd, 503, "too many tunnels")
        close(fd)
        continue
      }
      let thread = Thread { [self] in
        serve(fd)
        state.withLock { $0.tunnels -= 1 }
      }
      thread.name = "webhook-tunnel"
      thread.start()
    }
    close(listener)
  }

  /// One client connection: its CONNECT request, the check, the connection, then the relay.
  private func serve(_ client: Int32) {
    defer { close(client) }
    func badRequest(_ status: Int, _ reason: String, extra: String = "") {
      state.withLock { $0.counts.badRequests += 1 }
      Self.answer(client, status, reason, extra: extra)
    }
    let requestDeadline = ContinuousClock.now + limits.requestTimeout
    guard let (head, rest) = Self.readHead(client, deadline: requestDeadline) else {
      badRequest(400, "no request head")
      return
    }
    let lines = head.split(separator: "\r\n", omittingEmptySubsequences: false)
    let requestLine = lines.first.map { $0.split(separator: " ") } ?? []
    guard requestLine.count == 3, requestLine[0] == "CONNECT" else {
      badRequest(405, "only CONNECT", extra: "Allow: CONNECT\r\n")
      return
    }
    let authorization = lines.dropFirst().first { $0.lowercased().hasPrefix("proxy-authorization:") }
      .map { $0.dropFirst("proxy-authorization:".count).trimmingCharacters(in: .whitespaces) }
    let expected = "Basic " + Data("substatus:\(token)".utf8).base64EncodedString()
    guard let authorization, Self.constantTimeEqual(authorization, expected) else {
      badRequest(407, "proxy authorization required", extra: "Proxy-Authenticate: Basic realm=\"substatus\"\r\n")
      return
    }
    let target = requestLine[1]
    guard let colon = target.lastIndex(of: ":"), let port = Int(target[target.index(after: colon)...]),
      (1...65535).contains(port), colon > target.startIndex
    else {
      badRequest(400, "the target is not host:port")
      return
    }
    var host = String(target[..<colon])
    if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }

    let key = Self.key(host: host, port: port)
    let grants = state.withLock { $0.grants[key] ?? [] }
    let policy = WebhookURLPolicy(
      allowPrivateAddresses: grants.isEmpty
        ? fallbackPolicy.allowPrivateAddresses : grants.allSatisfy(\.policy.allowPrivateAddresses))
    let resolver: any WebhookAddressResolver = grants.first?.resolver ?? SystemWebhookAddressResolver()
    func refuse(_ status: Int, _ reason: String) {
      state.withLock { if status == 403 { $0.counts.refusedAddress += 1 } else { $0.counts.failed += 1 } }
      for grant in grants { grant.record(refusal: status == 403 ? reason : nil, failure: status == 403 ? nil : reason) }
      Self.answer(client, status, reason)
    }

    let addresses: [WebhookIPAddress]
    switch Self.resolve(host, with: resolver, timeout: limits.requestTimeout) {
    case .success(let list): addresses = list
    case .failure(let rejection):
      refuse(502, rejection.reason)
      return
    }
    for address in addresses {
      do { try policy.checkAddress(address) } catch {
        refuse(403, error.reason)
        return
      }
    }
    var upstream: Int32 = -1
    var lastError = ""
    for address in addresses {
      switch Self.connect(to: address, port: port, timeout: limits.connectTimeout) {
      case .success(let fd): upstream = fd
      case .failure(let error): lastError = "cannot connect to \(address) port \(port): \(error.description)"
      }
      if upstream >= 0 { break }
    }
    guard upstream >= 0 else {
      refuse(502, lastError)
      return
    }
    defer { close(upstream) }
    state.withLock { $0.counts.established += 1 }
    guard Self.sendAll(client, Array("HTTP/1.1 200 Connection established\r\n\r\n".utf8)),
      rest.isEmpty || Self.sendAll(upstream, rest)
    else { return }
    relay(client, upstream)
  }

  /// Moves bytes both ways until both sides have closed, one fails, or nothing moves for the idle
  /// timeout. A side's end of stream is passed on as a half close.
  private func relay(_ a: Int32, _ b: Int32) {
    let idleMs = Int32(clamping: limits.idleTimeout.milliseconds)
    var sendTimeout = timeval(tv_sec: Int(idleMs / 1000), tv_usec: Int(idleMs % 1000) * 1000)
    for fd in [a, b] {
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &sendTimeout, socklen_t(MemoryLayout<timeval>.size))
    }
    var open = [true, true]  // a -> b, b -> a
    var buffer = [UInt8](repeating: 0, count: 16 * 1024)
    while open[0] || open[1] {
      var fds = [
        pollfd(fd: open[0] ? a : -1, events: Int16(POLLIN), revents: 0),
        pollfd(fd: open[1] ? b : -1, events: Int16(POLLIN), revents: 0),
      ]
      let ready = poll(&fds, 2, idleMs)
      if ready < 0 {
        if errno == EINTR { continue }
        return
      }
      if ready == 0 { return }  // idle
      for (i, (from, to)) in [(a, b), (b, a)].enumerated() where open[i] && fds[i].revents != 0 {
        let n = buffer.withUnsafeMutableBytes { recv(from, $0.baseAddress, $0.count, 0) }
        if n > 0 {
          guard Self.sendAll(to, Array(buffer[0..<n])) else { return }
        } else if n == 0 {
          open[i] = false
          shutdown(to, Int32(SHUT_WR))
        } else if errno != EINTR && errno != EAGAIN {
          return
        }
      }
    }
  }

  // MARK: Helpers

  /// Reads up to the end of the request head (at most 8 KiB) before the deadline; returns the head
  /// without its blank line, and any bytes after it.
  private static func readHead(_ fd: Int32, deadline: ContinuousClock.Instant) -> (String, [UInt8])? {
    var received: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 2048)
    let terminator: [UInt8] = Array("\r\n\r\n".utf8)
    while received.count <= 8192 {
      if let end = received.firstRange(of: terminator) {
        return (String(decoding: received[..<end.lowerBound], as: UTF8.self), Array(received[end.upperBound...]))
      }
      let left = (deadline - .now).milliseconds
      guard left > 0 else { return nil }
      var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
      let ready = poll(&pfd, 1, Int32(clamping: left))
      if ready < 0 && errno == EINTR { continue }
      guard ready > 0 else { return nil }
      let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
      if n < 0 && errno == EINTR { continue }
      guard n > 0 else { return nil }
      received += chunk[0..<n]
    }
    return nil
  }

  /// Runs the (async) resolver from this thread, waiting at most `timeout`.
  private static func resolve(
    _ host: String, with resolver: any WebhookAddressResolver, timeout: Duration
  ) -> Result<[WebhookIPAddress], WebhookURLRejection> {
    let result = Mutex<Result<[WebhookIPAddress], WebhookURLRejection>?>(nil)
    let done = DispatchSemaphore(value: 0)
    let task = Task {
      let r: Result<[WebhookIPAddress], WebhookURLRejection>
      do throws(WebhookURLRejection) { r = .success(try await resolver.addresses(of: host)) } catch { r = .failure(error) }
      result.withLock { $0 = r }
      done.signal()
    }
    guard done.wait(timeout: .now() + timeout.seconds) == .success, let r = result.withLock({ $0 }) else {
      task.cancel()
      return .failure(WebhookURLRejection("cannot resolve \(host): no answer within \(WebhookDispatcher.describe(timeout))"))
    }
    return r
  }

  /// A blocking TCP connection to `address`:`port` made within `timeout`.
  private static func connect(to address: WebhookIPAddress, port: Int, timeout: Duration) -> Result<
    Int32, WebhookTunnelProxyError
  > {
    let family = address.bytes.count == 4 ? AF_INET : AF_INET6
    let fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
    guard fd >= 0 else { return .failure(WebhookTunnelProxyError(errnoText())) }
    var storage = sockaddr_storage()
    let length: socklen_t
    if family == AF_INET {
      var v4 = sockaddr_in()
      v4.sin_family = sa_family_t(AF_INET)
      v4.sin_port = UInt16(port).bigEndian
      withUnsafeMutableBytes(of: &v4.sin_addr) { $0.copyBytes(from: address.bytes) }
      withUnsafeMutableBytes(of: &storage) { $0.storeBytes(of: v4, as: sockaddr_in.self) }
      length = socklen_t(MemoryLayout<sockaddr_in>.size)
    } else {
      var v6 = sockaddr_in6()
      v6.sin6_family = sa_family_t(AF_INET6)
      v6.sin6_port = UInt16(port).bigEndian
      withUnsafeMutableBytes(of: &v6.sin6_addr) { $0.copyBytes(from: address.bytes) }
      withUnsafeMutableBytes(of: &storage) { $0.storeBytes(of: v6, as: sockaddr_in6.self) }
      length = socklen_t(MemoryLayout<sockaddr_in6>.size)
    }
    let rc = withUnsafePointer(to: &storage) { p in
      p.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, length) }
    }
    if rc != 0 && errno != EINPROGRESS {
      let text = errnoText()
      close(fd)
      return .failure(WebhookTunnelProxyError(text))
    }
    if rc != 0 {
      var pfd = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
      let deadline = ContinuousClock.now + timeout
      var ready: Int32 = -1
      repeat {
        ready = poll(&pfd, 1, Int32(clamping: max(0, (deadline - .now).milliseconds)))
      } while ready < 0 && errno == EINTR
      guard ready > 0 else {
        close(fd)
        return .failure(WebhookTunnelProxyError("no connection within \(WebhookDispatcher.describe(timeout))"))
      }
      var soError: Int32 = 0
      var size = socklen_t(MemoryLayout<Int32>.size)
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &soError, &size)
      guard soError == 0 else {
        close(fd)
        return .failure(WebhookTunnelProxyError(String(cString: strerror(soError))))
      }
    }
    _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
    setNoDelay(fd)
    return .success(fd)
  }

  /// Bytes relayed go out at once: without it Nagle's algorithm holds a TLS record back until the
  /// peer's delayed ACK (about 40 ms per handshake round trip).
  private static func setNoDelay(_ fd: Int32) {
    var one: Int32 = 1
    setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
  }

  /// Writes all of `bytes` (blocking, bounded by the socket's send timeout); `false` on failure.
  private static func sendAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
    var offset = 0
    while offset < bytes.count {
      let n = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
      if n < 0 && errno == EINTR { continue }
      guard n > 0 else { return false }
      offset += n
    }
    return true
  }

  /// Answers a CONNECT that is not served: a status, the reason as a text body, and the close.
  private static func answer(_ fd: Int32, _ status: Int, _ reason: String, extra: String = "") {
    let phrase =
      [400: "Bad Request", 403: "Forbidden", 405: "Method Not Allowed", 407: "Proxy Authentication Required",
       502: "Bad Gateway", 503: "Service Unavailable"][status] ?? "Error"
    let body = Array((reason + "\n").utf8)
    let head =
      "HTTP/1.1 \(status) \(phrase)\r\n\(extra)Content-Type: text/plain; charset=utf-8\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n"
    var timeout = timeval(tv_sec: 2, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    _ = sendAll(fd, Array(head.utf8) + body)
  }

  private static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
    let (x, y) = (Array(a.utf8), Array(b.utf8))
    guard x.count == y.count else { return false }
    return zip(x, y).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
  }

  private static func errnoText() -> String { String(cString: strerror(errno)) }
}
