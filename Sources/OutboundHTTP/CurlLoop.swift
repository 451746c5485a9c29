import CCurl
import Glibc
import Synchronization

// The thin C layer: one thread owns the multi handle and every easy handle once it is handed in;
// other threads touch only the inbox (under its Mutex) and `curl_multi_wakeup`, the one libcurl
// call that is safe from any thread (and only while the multi handle lives: `Inbox.alive`).

private let globalInit: Bool = curl_global_init(ccurl_global_default()) == CURLE_OK

/// What other threads hand the loop.
private struct Inbox {
  var adds: [Transfer] = []
  var cancels: [Int] = []
  var stopping = false
  /// The multi handle has not been cleaned up: `curl_multi_wakeup` may be called.
  var alive = true
  var nextId = 0
}

/// Drives the transfers of one ``OutboundHTTPClient``.
///
/// `@unchecked Sendable`: `multi`, `active` and the easy handles are used only on the loop thread
/// (and by ``Transfer``'s setup before it is handed in); the inbox and the counters are
/// synchronized.
final class CurlLoop: @unchecked Sendable {
  private let multi: UnsafeMutableRawPointer
  private let inbox = Mutex(Inbox())
  private let configuration: OutboundHTTPClient.Configuration
  /// `CURLOPT_CAINFO` of every transfer.
  let caFile: String?
  private var thread: pthread_t?
  /// Loop thread only.
  private var active: [Int: Transfer] = [:]
  let connectionsOpen = Atomic<Int>(0)
  private let inFlight = Atomic<Int>(0)
  private let outcomes = Mutex<[String: Int]>([:])

  init(configuration: OutboundHTTPClient.Configuration) {
    precondition(globalInit, "curl_global_init failed")
    guard let multi = curl_multi_init() else { fatalError("curl_multi_init failed") }
    self.multi = multi
    self.configuration = configuration
    self.caFile = configuration.caFile
    _ = ccurl_multi_setopt_long(multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, configuration.maxConnections)
    _ = ccurl_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, configuration.maxConnectionsPerHost)
    // Idle connections kept for reuse: all of the cap may be idle, none beyond it.
    _ = ccurl_multi_setopt_long(multi, CURLMOPT_MAXCONNECTS, configuration.maxConnections)
    // HTTP/1.1 only (requests ask for it): no multiplexing, one transfer per connection.
    _ = ccurl_multi_setopt_long(multi, CURLMOPT_PIPELINING, 0)
    var attributes = pthread_attr_t()
    pthread_attr_init(&attributes)
    pthread_attr_setstacksize(&attributes, 1 << 20)
    var thread = pthread_t()
    let box = Unmanaged.passRetained(self).toOpaque()
    let rc = pthread_create(&thread, &attributes, { raw in
      let loop = Unmanaged<CurlLoop>.fromOpaque(raw!).takeRetainedValue()
      loop.run()
      return nil
    }, box)
    pthread_attr_destroy(&attributes)
    precondition(rc == 0, "cannot start the outbound HTTP thread")
    self.thread = thread
  }

  // MARK: Any thread

  /// Sends `request` through the loop and waits for its end.
  func perform(_ request: OutboundRequest) async -> Result<OutboundResponse, OutboundHTTPError> {
    let id = inbox.withLock { s -> Int in
      s.nextId += 1
      return s.nextId
    }
    let transfer: Transfer
    do { transfer = try Transfer(id: id, request: request, loop: self) } catch {
      count(error.code.description)
      return .failure(error)
    }
    inFlight.add(1, ordering: .relaxed)
    return await withTaskCancellationHandler {
      await withCheckedContinuation { continuation in
        transfer.continuation = continuation
        let accepted = inbox.withLock { s -> Bool in
          guard !s.stopping else { return false }
          s.adds.append(transfer)
          _ = curl_multi_wakeup(multi)
          return true
        }
        if !accepted {
          finish(transfer, .failure(OutboundHTTPError(code: .cancelled, message: "the outbound HTTP client has shut down")))
        }
      }
    } onCancel: {
      transfer.cancelled.store(true, ordering: .releasing)
      inbox.withLock { s in
        guard s.alive else { return }
        s.cancels.append(id)
        _ = curl_multi_wakeup(multi)
      }
    }
  }

  /// The counters now.
  func metrics() -> OutboundHTTPMetrics {
    var requests = Dictionary(uniqueKeysWithValues: OutboundHTTPError.Code.allLabels.map { ($0, 0) })
    for (outcome, n) in outcomes.withLock({ $0 }) { requests[outcome] = n }
    return OutboundHTTPMetrics(
      connectionsOpen: connectionsOpen.load(ordering: .relaxed), connectionLimit: configuration.maxConnections,
      inFlight: inFlight.load(ordering: .relaxed), requests: requests)
  }

  /// Stops the loop (see ``OutboundHTTPClient/shutdown()``) and waits for its thread.
  func stop() {
    let thread = inbox.withLock { s -> pthread_t? in
      guard !s.stopping else { return nil }
      s.stopping = true
      if s.alive { _ = curl_multi_wakeup(multi) }
      return self.thread
    }
    if let thread, !pthread_equal(thread, pthread_self()).isTrue { pthread_join(thread, nil) }
  }

  private func count(_ outcome: String) {
    outcomes.withLock { $0[outcome, default: 0] += 1 }
  }

  /// Frees `transfer`'s handles and resumes its caller.
  private func finish(_ transfer: Transfer, _ result: Result<OutboundResponse, OutboundHTTPError>) {
    transfer.release()
    inFlight.subtract(1, ordering: .relaxed)
    switch result {
    case .success(let response): count(response.truncated ? "too_large" : "ok")
    case .failure(let error): count(error.code.description)
    }
    transfer.continuation?.resume(returning: result)
    transfer.continuation = nil
  }

  // MARK: The loop thread

  private func run() {
    var stopping = false
    while true {
      let (adds, cancels, stop) = inbox.withLock { s in
        defer { (s.adds, s.cancels) = ([], []) }
        return (s.adds, s.cancels, s.stopping)
      }
      stopping = stop
      for transfer in adds {
        if stopping || transfer.cancelled.load(ordering: .acquiring) {
          finish(transfer, .failure(Self.cancelled(stopping)))
          continue
        }
        guard curl_multi_add_handle(multi, transfer.easy) == CURLM_OK else {
          finish(transfer, .failure(OutboundHTTPError(code: .other, message: "cannot start the transfer")))
          continue
        }
        active[transfer.id] = transfer
      }
      for id in cancels {
        guard let transfer = active.removeValue(forKey: id) else { continue }
        curl_multi_remove_handle(multi, transfer.easy)
        finish(transfer, .failure(Self.cancelled(false)))
      }
      if stopping {
        for transfer in active.values {
          curl_multi_remove_handle(multi, transfer.easy)
          finish(transfer, .failure(Self.cancelled(true)))
        }
        active = [:]
        break
      }
      var running: Int32 = 0
      _ = curl_multi_perform(multi, &running)
      var left: Int32 = 0
      while let message = curl_multi_info_read(multi, &left) {
        guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
        let code = message.pointee.data.result
        var raw: UnsafeMutableRawPointer?
        _ = ccurl_easy_getinfo_pointer(easy, CURLINFO_PRIVATE, &raw)
        guard let raw else { continue }
        let transfer = Unmanaged<Transfer>.fromOpaque(raw).takeUnretainedValue()
        active[transfer.id] = nil
        curl_multi_remove_handle(multi, easy)
        finish(transfer, transfer.result(code))
      }
      // The loop's own deadline, behind libcurl's: a transfer never outlives it, whatever state
      // libcurl holds it in (waiting for a connection slot included).
      let now = ContinuousClock.now
      var wait = Duration.seconds(1)
      for transfer in Array(active.values) {
        if now >= transfer.hardDeadline {
          active[transfer.id] = nil
          curl_multi_remove_handle(multi, transfer.easy)
          finish(transfer, .failure(transfer.timeoutError()))
        } else {
          wait = min(wait, transfer.hardDeadline - now)
        }
      }
      var curlTimeout = -1
      _ = curl_multi_timeout(multi, &curlTimeout)
      var waitMs = Int32(clamping: (wait.components.seconds * 1000) + wait.components.attoseconds / 1_000_000_000_000_000 + 1)
      if curlTimeout >= 0 { waitMs = min(waitMs, Int32(clamping: curlTimeout)) }
      _ = curl_multi_poll(multi, nil, 0, max(0, waitMs), nil)
    }
    inbox.withLock { s in
      s.alive = false
      // Anything handed in after the last look.
      for transfer in s.adds { finish(transfer, .failure(Self.cancelled(true))) }
      s.adds = []
    }
    curl_multi_cleanup(multi)
  }

  private static func cancelled(_ shutdown: Bool) -> OutboundHTTPError {
    OutboundHTTPError(
      code: .cancelled, message: shutdown ? "the outbound HTTP client has shut down" : "cancelled")
  }
}

extension Int32 {
  fileprivate var isTrue: Bool { self != 0 }
}

// MARK: Callbacks (no captures: they convert to C function pointers)

/// Keeps the body up to the limit; past it, stops the transfer (returning less than given aborts
/// it with CURLE_WRITE_ERROR, and libcurl closes the connection).
private let writeBody: curl_write_callback = { data, size, count, context in
  let transfer = Unmanaged<Transfer>.fromOpaque(context!).takeUnretainedValue()
  let n = size * count
  let room = transfer.limit - transfer.body.count
  if n > room {
    if room > 0, let data {
      transfer.body.append(contentsOf: UnsafeRawBufferPointer(start: data, count: room))
    }
    transfer.truncated = true
    return 0
  }
  if n > 0, let data { transfer.body.append(contentsOf: UnsafeRawBufferPointer(start: data, count: n)) }
  return n
}

/// Checks the address with the request's policy before the socket exists.
private let openSocket: curl_opensocket_callback = { context, purpose, address in
  let transfer = Unmanaged<Transfer>.fromOpaque(context!).takeUnretainedValue()
  guard let address else { return ccurl_socket_bad() }
  var bytes = [UInt8](repeating: 0, count: 16)
  var port: UInt32 = 0
  let length = Int(ccurl_sockaddr_ip(address, &bytes, &port))
  guard length == 4 || length == 16 else {
    transfer.refusals.append("an address of an unknown family")
    return ccurl_socket_bad()
  }
  if let policy = transfer.policy,
    let reason = policy(OutboundAddress(bytes: Array(bytes.prefix(length)), port: Int(port)))
  {
    transfer.refusals.append(reason)
    return ccurl_socket_bad()
  }
  let fd = ccurl_open_socket(address)
  if fd >= 0 {
    transfer.opened += 1
    transfer.loop.connectionsOpen.add(1, ordering: .relaxed)
  }
  return fd
}

/// Counts the socket closed (called for every socket `openSocket` opened, when libcurl closes it).
private let closeSocket: curl_closesocket_callback = { context, fd in
  let loop = Unmanaged<CurlLoop>.fromOpaque(context!).takeUnretainedValue()
  loop.connectionsOpen.subtract(1, ordering: .relaxed)
  return close(fd)
}

// MARK: One transfer

/// One request's easy handle and what its callbacks gather.
///
/// `@unchecked Sendable`: set up by the caller's thread, then used only on the loop thread (the
/// inbox's Mutex orders the two); `cancelled` is atomic.
final class Transfer: @unchecked Sendable {
  let id: Int
  let easy: UnsafeMutableRawPointer
  unowned let loop: CurlLoop
  let limit: Int
  let policy: OutboundAddressPolicy?
  let started = ContinuousClock.now
  let timeout: Duration
  /// Response header fields to hand back (``OutboundRequest/responseHeaders``).
  let wantedHeaders: [String]
  /// The loop's own deadline: libcurl's plus a little, so libcurl's (with its message) ends first.
  let hardDeadline: ContinuousClock.Instant
  let cancelled = Atomic<Bool>(false)
  var continuation: CheckedContinuation<Result<OutboundResponse, OutboundHTTPError>, Never>?
  var body: [UInt8] = []
  var truncated = false
  var refusals: [String] = []
  var opened = 0
  private var headers: UnsafeMutablePointer<curl_slist>?
  private var resolve: UnsafeMutablePointer<curl_slist>?
  private let errorBuffer: UnsafeMutablePointer<CChar>
  private var released = false

  init(id: Int, request: OutboundRequest, loop: CurlLoop) throws(OutboundHTTPError) {
    let lower = request.url.lowercased()
    guard lower.hasPrefix("http://") || lower.hasPrefix("https://") else {
      throw OutboundHTTPError(code: .invalidRequest, message: "not an http(s) URL")
    }
    guard !request.url.utf8.contains(0) else {
      throw OutboundHTTPError(code: .invalidRequest, message: "the URL holds a NUL byte")
    }
    guard let easy = curl_easy_init() else { throw OutboundHTTPError(code: .other, message: "curl_easy_init failed") }
    self.id = id
    self.easy = easy
    self.loop = loop
    self.limit = max(0, request.maxResponseBytes)
    self.policy = request.addressPolicy
    self.timeout = request.timeout
    self.wantedHeaders = request.responseHeaders
    self.hardDeadline = started + max(request.timeout, .milliseconds(1)) + .milliseconds(200)
    self.errorBuffer = .allocate(capacity: Int(CURL_ERROR_SIZE))
    errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE))
    let me = Unmanaged.passUnretained(self).toOpaque()

    var ok = true
    func set(_ option: CURLoption, _ value: Int) { ok = ok && ccurl_easy_setopt_long(easy, option, value) == CURLE_OK }
    func set(_ option: CURLoption, _ value: String) {
      ok = ok && ccurl_easy_setopt_string(easy, option, value) == CURLE_OK
    }
    func milliseconds(_ d: Duration) -> Int {
      max(1, Int(d.components.seconds) * 1000 + Int(d.components.attoseconds / 1_000_000_000_000_000))
    }
    set(CURLOPT_URL, request.url)
    set(CURLOPT_PROTOCOLS_STR, "http,https")
    set(CURLOPT_REDIR_PROTOCOLS_STR, "http,https")
    // Never a proxy, whatever the environment names (libcurl reads http_proxy, https_proxy,
    // all_proxy): an empty proxy turns them off.
    set(CURLOPT_PROXY, "")
    set(CURLOPT_NOSIGNAL, 1)
    set(CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_1_1))
    set(CURLOPT_TIMEOUT_MS, milliseconds(request.timeout))
    set(CURLOPT_CONNECTTIMEOUT_MS, milliseconds(min(request.connectTimeout, request.timeout)))
    if let low = request.lowSpeedLimit {
      set(CURLOPT_LOW_SPEED_LIMIT, max(1, low.bytesPerSecond))
      set(CURLOPT_LOW_SPEED_TIME, max(1, Int(low.period.components.seconds)))
    }
    ok = ok && ccurl_easy_setopt_off(easy, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(limit)) == CURLE_OK
    set(CURLOPT_FOLLOWLOCATION, request.maxRedirects > 0 ? 1 : 0)
    set(CURLOPT_MAXREDIRS, max(0, request.maxRedirects))
    set(CURLOPT_SSL_VERIFYPEER, 1)
    set(CURLOPT_SSL_VERIFYHOST, 2)
    if let caFile = loop.caFile { set(CURLOPT_CAINFO, caFile) }
    // No Accept-Encoding: bodies arrive as sent and count against the limit as such.
    if request.method.hasBody {
      // A PUT is sent as libcurl's POST (the same copied body and size) under another method
      // name, so both share one path and one set of limits.
      set(CURLOPT_POST, 1)
      if request.method != .post { set(CURLOPT_CUSTOMREQUEST, request.method.name) }
      ok = ok && ccurl_easy_setopt_off(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(request.body.count)) == CURLE_OK
      // Copied by libcurl during the call.
      if request.body.isEmpty {
        set(CURLOPT_COPYPOSTFIELDS, "")
      } else {
        ok =
          ok
          && request.body.withUnsafeBytes { raw in
            ccurl_easy_setopt_pointer(easy, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: raw.baseAddress))
          } == CURLE_OK
      }
    } else {
      set(CURLOPT_HTTPGET, 1)
    }
    var list: UnsafeMutablePointer<curl_slist>?
    for (name, value) in request.headers {
      guard !name.utf8.contains(where: { $0 == 0 || $0 == 13 || $0 == 10 || $0 == 58 }),
        !value.utf8.contains(where: { $0 == 0 || $0 == 13 || $0 == 10 })
      else { continue }
      list = curl_slist_append(list, "\(name): \(value)")
    }
    // libcurl would wait up to a second for `100 Continue` before sending a body over 1 KiB.
    if request.method.hasBody { list = curl_slist_append(list, "Expect:") }
    headers = list
    ok = ok && ccurl_easy_setopt_slist(easy, CURLOPT_HTTPHEADER, list) == CURLE_OK
    var overrides: UnsafeMutablePointer<curl_slist>?
    for entry in request.addressOverrides where !entry.utf8.contains(0) {
      overrides = curl_slist_append(overrides, entry)
    }
    resolve = overrides
    if overrides != nil { ok = ok && ccurl_easy_setopt_slist(easy, CURLOPT_RESOLVE, overrides) == CURLE_OK }
    ok = ok && ccurl_easy_setopt_pointer(easy, CURLOPT_ERRORBUFFER, errorBuffer) == CURLE_OK
    ok = ok && ccurl_easy_setopt_write_function(easy, writeBody) == CURLE_OK
    ok = ok && ccurl_easy_setopt_pointer(easy, CURLOPT_WRITEDATA, me) == CURLE_OK
    ok = ok && ccurl_easy_setopt_opensocket_function(easy, openSocket) == CURLE_OK
    ok = ok && ccurl_easy_setopt_pointer(easy, CURLOPT_OPENSOCKETDATA, me) == CURLE_OK
    ok = ok && ccurl_easy_setopt_closesocket_function(easy, closeSocket) == CURLE_OK
    ok = ok && ccurl_easy_setopt_pointer(easy, CURLOPT_CLOSESOCKETDATA, Unmanaged.passUnretained(loop).toOpaque()) == CURLE_OK
    ok = ok && ccurl_easy_setopt_pointer(easy, CURLOPT_PRIVATE, me) == CURLE_OK
    guard ok else {
      let message = String(cString: errorBuffer)
      release()
      throw OutboundHTTPError(code: .invalidRequest, message: message.isEmpty ? "the request cannot be sent" : message)
    }
  }

  deinit { release() }

  /// Frees the easy handle (removed from the multi handle first), its lists and its buffer.
  func release() {
    guard !released else { return }
    released = true
    curl_easy_cleanup(easy)
    curl_slist_free_all(headers)
    curl_slist_free_all(resolve)
    errorBuffer.deallocate()
  }

  func timeoutError() -> OutboundHTTPError {
    OutboundHTTPError(code: .timeout, message: "no whole answer within \(Self.describe(timeout))")
  }

  static func describe(_ d: Duration) -> String {
    let ms = d.components.seconds * 1000 + d.components.attoseconds / 1_000_000_000_000_000
    return ms % 1000 == 0 ? "\(ms / 1000) s" : "\(ms) ms"
  }

  /// The values of ``wantedHeaders`` in the last response (libcurl's header API, 7.83+).
  private func responseHeaderValues() -> [String: String] {
    var values: [String: String] = [:]
    for name in wantedHeaders where !name.isEmpty && !name.utf8.contains(0) {
      var header: UnsafeMutablePointer<curl_header>?
      // Index 0: the first value; origin 1 is CURLH_HEADER (a plain server header); request -1:
      // the last request (after redirects).
      guard curl_easy_header(easy, name, 0, 1, -1, &header) == CURLHE_OK,
        let value = header?.pointee.value
      else { continue }
      values[name] = String(cString: value)
    }
    return values
  }

  /// The caller's answer for libcurl's result `code`.
  func result(_ code: CURLcode) -> Result<OutboundResponse, OutboundHTTPError> {
    var status = 0
    _ = ccurl_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
    let duration = ContinuousClock.now - started
    let text = String(cString: errorBuffer)
    let message = text.isEmpty ? String(cString: curl_easy_strerror(code)) : text
    func failure(_ c: OutboundHTTPError.Code, _ m: String = message) -> Result<OutboundResponse, OutboundHTTPError> {
      .failure(OutboundHTTPError(code: c, message: m))
    }
    switch code {
    case CURLE_OK:
      var response = OutboundResponse(status: status, body: body, truncated: false, duration: duration)
      response.headers = responseHeaderValues()
      return .success(response)
    case _ where code == CURLE_FILESIZE_EXCEEDED || (code == CURLE_WRITE_ERROR && truncated):
      truncated = true
      guard status > 0 else { return failure(.tooLarge, "the answer is larger than \(limit) bytes") }
      return .success(OutboundResponse(status: status, body: body, truncated: true, duration: duration))
    case CURLE_OPERATION_TIMEDOUT:
      return .failure(message.contains("too slow") ? OutboundHTTPError(code: .timeout, message: message) : timeoutError())
    case CURLE_COULDNT_CONNECT where !refusals.isEmpty && opened == 0:
      return failure(.addressRefused, refusals[0])
    case CURLE_COULDNT_CONNECT:
      return failure(.connectFailed)
    case CURLE_COULDNT_RESOLVE_HOST:
      return failure(.resolveFailed)
    case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CACERT_BADFILE, CURLE_SSL_CERTPROBLEM,
      CURLE_SSL_CIPHER, CURLE_SSL_ISSUER_ERROR, CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_SSL_INVALIDCERTSTATUS:
      return failure(.tlsFailed)
    case CURLE_GOT_NOTHING, CURLE_RECV_ERROR, CURLE_SEND_ERROR, CURLE_PARTIAL_FILE:
      return failure(.connectionLost)
    case CURLE_UNSUPPORTED_PROTOCOL, CURLE_URL_MALFORMAT:
      return failure(.invalidRequest)
    default:
      return failure(.other)
    }
  }
}
