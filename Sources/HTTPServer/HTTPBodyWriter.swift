import CMicroHTTPD
import Synchronization

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// The producer of a streamed response body (``HTTPResponse/streamed(status:headers:maxPendingBytes:_:)``).
public final class HTTPStreamedBody: Sendable {
  /// The most bytes written and not yet taken by the connection before a write waits.
  public let maxPendingBytes: Int
  /// Writes the body; the body ends when it returns.
  public let produce: @Sendable (HTTPBodyWriter) async throws -> Void

  /// Creates a streamed body.
  /// - Parameters:
  ///   - maxPendingBytes: The backpressure bound (at least 1).
  ///   - produce: Writes the body.
  public init(maxPendingBytes: Int, produce: @escaping @Sendable (HTTPBodyWriter) async throws -> Void) {
    self.maxPendingBytes = max(1, maxPendingBytes)
    self.produce = produce
  }
}

/// Where a streamed response body is written, chunk by chunk, while the server sends it.
///
/// Bytes written wait in a buffer until libmicrohttpd's thread takes them for the socket (its
/// content-reader callback). While the buffer is empty the connection is suspended
/// (`MHD_suspend_connection` from the callback, as libmicrohttpd documents), so an idle stream
/// costs no polling; a write resumes it. A write waits while more than the bound is pending.
///
/// A suspended connection is not watched by libmicrohttpd, so the server checks every 250 ms
/// whether the client of an idle stream closed its side (a zero-byte `recv` with `MSG_PEEK`) and
/// then ends the response and cancels the producer. (Over TLS an orderly close is only seen at
/// the next write.) When the client goes away, the producer's task is cancelled before a write
/// waiting for room throws; a producer must still treat any failed write as the end of the body,
/// as it may be between writes when the stream ends.
public final class HTTPBodyWriter: Sendable {
  struct State {
    var pending: [UInt8] = []
    /// Bytes of `pending` already handed to libmicrohttpd.
    var sent = 0
    /// The producer returned: end the body once `pending` is out.
    var finished = false
    /// The producer threw: close the connection once `pending` is out.
    var failed = false
    /// The client went away, or the server stops: writes throw, the body ends at once.
    var closed = false
    /// The connection, while the response is queued on it; `nil` before and after.
    var connection: UnsafeHandle?
    /// Its socket, to notice a client that closed while the stream is idle.
    var socket: Int32 = -1
    /// The connection is suspended in the content reader, waiting for bytes.
    var waitingForBytes = false
    /// A write waiting for the pending bytes to drain below the bound.
    var waiter: CheckedContinuation<Void, any Error>?
    /// The task running the producer, cancelled when the client goes away.
    var producer: Task<Void, Never>?
  }

  /// The backpressure bound.
  public let maxPendingBytes: Int
  let state = Mutex(State())

  init(maxPendingBytes: Int) { self.maxPendingBytes = maxPendingBytes }

  /// Bytes written and not yet taken by the connection.
  public var pendingBytes: Int { state.withLock { $0.pending.count - $0.sent } }

  /// Appends bytes to the body; waits while more than ``maxPendingBytes`` are pending.
  ///
  /// - Throws: `CancellationError` when the client has gone away, the server is stopping, or the
  ///   producer's task is cancelled; the bytes are then dropped.
  public func write(_ bytes: [UInt8]) async throws {
    guard !bytes.isEmpty else { return }
    let mustWait = try state.withLock { state throws(CancellationError) -> Bool in
      guard !state.closed, !state.finished, !state.failed else { throw CancellationError() }
      state.pending.append(contentsOf: bytes)
      wakeConnection(&state)
      return state.pending.count - state.sent > maxPendingBytes
    }
    guard mustWait else { return }
    try await withTaskCancellationHandler {
      try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
        let outcome = state.withLock { state -> Result<Void, any Error>? in
          if state.closed || Task.isCancelled { return .failure(CancellationError()) }
          if state.pending.count - state.sent <= maxPendingBytes { return .success(()) }
          state.waiter = continuation
          return nil
        }
        if let outcome { continuation.resume(with: outcome) }
      }
    } onCancel: {
      let waiter = state.withLock { state in
        defer { state.waiter = nil }
        return state.waiter
      }
      waiter?.resume(throwing: CancellationError())
    }
  }

  /// Starts `produce` in a task of its own; the body ends when it returns.
  func run(_ produce: @escaping @Sendable (HTTPBodyWriter) async throws -> Void) {
    let task = Task {
      do {
        try await produce(self)
        self.end(failed: false)
      } catch {
        self.end(failed: true)
      }
    }
    let cancelNow = state.withLock { state -> Bool in
      state.producer = task
      return state.closed
    }
    if cancelNow { task.cancel() }
  }

  /// The producer is done: send what is pending, then the end of the body (or close, if failed).
  private func end(failed: Bool) {
    state.withLock { state in
      if failed { state.failed = true } else { state.finished = true }
      wakeConnection(&state)
    }
  }

  /// Ends the stream at once (client gone, server stopping): writes throw, the producer is
  /// cancelled, and a suspended connection is resumed so that libmicrohttpd closes it.
  func close() {
    let (waiter, producer) = state.withLock { state in
      state.closed = true
      wakeConnection(&state)
      defer { state.waiter = nil }
      return (state.waiter, state.producer)
    }
    // Cancel first: the producer's cancellation handlers run while its write still waits.
    producer?.cancel()
    waiter?.resume(throwing: CancellationError())
  }

  /// Cancels the producer's task (the server is stopping); what it writes before returning is
  /// still sent.
  func cancelProducer() {
    state.withLock { $0.producer }?.cancel()
  }

  /// Resumes the connection if it waits for bytes. Called with the lock held: the content reader
  /// suspends under the same lock, so a resume never meets a connection that is not suspended.
  private func wakeConnection(_ state: inout State) {
    guard state.waitingForBytes, let connection = state.connection else { return }
    state.waitingForBytes = false
    MHD_resume_connection(connection.raw)
  }

  /// The response is queued on `connection` (libmicrohttpd's thread).
  func attach(_ connection: OpaquePointer) {
    let socket = substatus_mhd_connection_fd(connection)
    state.withLock { state in
      state.connection = UnsafeHandle(raw: connection)
      state.socket = socket
    }
  }

  /// If the stream is idle and its client has closed the connection, ends the stream. Called by
  /// the server's periodic sweep.
  func checkClientGone() {
    let gone = state.withLock { state -> Bool in
      // While suspended the connection cannot close, so the socket is still this connection's.
      guard state.waitingForBytes, !state.closed, state.socket >= 0 else { return false }
      return peerHasClosed(state.socket)
    }
    if gone { close() }
  }

  /// libmicrohttpd's content reader: copies pending bytes into `buffer` (its thread).
  /// - Returns: the count copied; 0 after suspending the connection until a write; or
  ///   ``endOfStream`` / ``endWithError``.
  func read(into buffer: UnsafeMutablePointer<CChar>, max: Int) -> Int {
    let (count, waiter) = state.withLock { state -> (Int, CheckedContinuation<Void, any Error>?) in
      if state.closed { return (Self.endWithError, nil) }
      let available = state.pending.count - state.sent
      if available == 0 {
        if state.finished { return (Self.endOfStream, nil) }
        if state.failed { return (Self.endWithError, nil) }
        guard let connection = state.connection else { return (Self.endWithError, nil) }
        state.waitingForBytes = true
        MHD_suspend_connection(connection.raw)
        return (0, nil)
      }
      let count = min(available, max)
      state.pending.withUnsafeBytes { bytes in
        UnsafeMutableRawPointer(buffer).copyMemory(from: bytes.baseAddress! + state.sent, byteCount: count)
      }
      state.sent += count
      if state.sent == state.pending.count {
        state.pending.removeAll(keepingCapacity: state.pending.count <= 2 * maxPendingBytes)
        state.sent = 0
      } else if state.sent > maxPendingBytes {
        state.pending.removeFirst(state.sent)
        state.sent = 0
      }
      guard state.pending.count - state.sent <= maxPendingBytes, let waiter = state.waiter else { return (count, nil) }
      state.waiter = nil
      return (count, waiter)
    }
    waiter?.resume()
    return count
  }

  /// The response is gone (sent, or its connection closed): libmicrohttpd's free callback.
  func detach() {
    state.withLock { state in
      state.connection = nil
      state.socket = -1
      state.waitingForBytes = false
    }
    close()
  }

  /// `MHD_CONTENT_READER_END_OF_STREAM` (a cast macro Swift does not import).
  static let endOfStream = -1
  /// `MHD_CONTENT_READER_END_WITH_ERROR`.
  static let endWithError = -2
}

/// Whether the client of a suspended connection has closed it: the socket is at its end (the
/// client closed, or shut down its sending side) or reset. Bytes waiting (a pipelined request)
/// are not a close. Never blocks (`MSG_PEEK | MSG_DONTWAIT`).
func peerHasClosed(_ socket: Int32) -> Bool {
  guard socket >= 0 else { return false }
  var byte: UInt8 = 0
  let n = recv(socket, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT))
  if n > 0 { return false }
  if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) { return false }
  return true
}

/// A pointer owned by libmicrohttpd, passed between the event thread and tasks. Only used under
/// a lock that orders it against libmicrohttpd's use, or on the event thread.
struct UnsafeHandle: @unchecked Sendable {
  let raw: OpaquePointer
}
