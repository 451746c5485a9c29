import CLinuxShims
import Glibc

/// What a connection built on a ``ConnectionPump`` does with what the pump reports.
protocol ConnectionPumpOwner: AnyObject {
  /// Handles the events the session collected (after bytes went in or frames went out).
  func processEvents()
  /// TCP is connected and TLS (when configured) negotiated `h2`: HTTP/2 may flow.
  func connectionEstablished()
  /// The connection management is about to close the connection, after a last flush: the streams
  /// still open may be finished now.
  func connectionWillClose(_ reason: ConnectionStateMachine.CloseReason)
  /// The socket is closed; nothing more will be reported.
  func connectionClosed(_ outcome: ConnectionPumpOutcome)
}

/// Why a connection's socket closed.
enum ConnectionPumpOutcome {
  /// The peer closed the connection (end of file, hangup).
  case peerClosed
  /// Both sides are done with the session (GOAWAY exchanged, no stream left).
  case sessionFinished
  /// `connect` failed with this errno.
  case connectFailed(Int32)
  /// Reading the socket failed.
  case readFailed
  /// Writing the socket failed.
  case writeFailed
  /// TLS failed (handshake, a bad record, or no ALPN `h2`).
  case tlsFailed(String)
  /// The peer broke the HTTP/2 protocol (nghttp2 queued GOAWAY where it could).
  case protocolError(H2SessionError)
  /// The connection management closed it.
  case management(ConnectionStateMachine.CloseReason)
  /// The owner closed it (``close(_:)``).
  case local
}

/// The socket and TLS pump of one HTTP/2 connection, shared by the server and the client: it
/// moves bytes between the socket, TLS and the nghttp2 session, keeps the connection's
/// ``ConnectionStateMachine`` informed and carries out what it decides, with a single timer armed
/// for its ``ConnectionStateMachine/nextDeadline``. Confined to the loop thread.
///
/// Reads stop while output waits for the socket: not reading is the backpressure.
final class ConnectionPump<Owner: ConnectionPumpOwner>: LoopChannel {
  let fd: Int32
  private(set) var token: UInt64 = 0
  let loop: EventLoop
  let session: H2Session
  /// The connection's owner; set right after creation, outlived by nothing the pump does.
  unowned var owner: Owner?
  private(set) var machine: ConnectionStateMachine
  private let counters: TransportCounters?
  /// TLS between the socket and the session, when configured; `plaintext` stages session output.
  private let tls: TLSConnection?
  private var plaintext: [UInt8] = []
  private var output: [UInt8] = []
  private var outputOffset = 0
  private let highWater: Int
  private var connected: Bool
  private var waitingForWritable: Bool
  private var flushScheduled = false
  private(set) var closed = false
  private var timer: UInt64?
  private var armedAt: Duration?
  /// Bytes written to the socket since the connection opened.
  private var bytesWritten: UInt64 = 0
  /// DATA bytes nghttp2 sent plus bytes written, at the last ``noteWriteProgress(drained:)``.
  private var progressAtCheck: UInt64 = 0
  /// Reply bytes charged to the transport's budget (``chargeReplyBytes(_:)``) and not yet
  /// taken by the socket.
  private var replyBytesCharged = 0

  /// Registers `fd` with `loop`: a connected socket (server) or one whose nonblocking `connect`
  /// is in progress (client: it waits for writability, then reports
  /// ``ConnectionPumpOwner/connectionEstablished()``).
  init(
    fd: Int32, loop: EventLoop, session: H2Session, tls: TLSConnection?, connecting: Bool,
    management: ConnectionStateMachine.Configuration, highWater: Int, counters: TransportCounters?
  ) {
    self.fd = fd
    self.loop = loop
    self.session = session
    self.tls = tls
    self.highWater = highWater
    self.counters = counters
    connected = !connecting
    waitingForWritable = connecting
    machine = ConnectionStateMachine(configuration: management, now: loop.now)
  }

  /// Starts watching the socket; call once the owner is set.
  func start() {
    token = loop.register(fd: fd, events: connected ? Epoll.input : Epoll.output, channel: self)
    rearmTimer()
    scheduleFlush()
  }

  // MARK: Events from the owner

  /// The handshake completed (the peer's SETTINGS arrived, or the client connection is ready).
  func handshakeCompleted() {
    machine.handshakeCompleted(now: loop.now)
  }

  /// A stream opened; `.refuse` when the request buffer is full (reset it with `REFUSED_STREAM`).
  func streamOpened() -> ConnectionStateMachine.StreamAdmission {
    let admission = machine.streamOpened()
    if admission == .refuse { counters?.refusedStreams.add(1, ordering: .relaxed) }
    return admission
  }

  /// A stream admitted by ``streamOpened()`` closed.
  func streamClosed() {
    machine.streamClosed(now: loop.now)
  }

  /// Reserves buffer room for `count` request bytes, in this connection's budget and the
  /// transport's; `false` when either is spent (the stream is then reset).
  func reserveRequestBytes(_ count: Int) -> Bool {
    guard machine.reserveRequestBytes(count) else {
      counters?.budgetResets.add(1, ordering: .relaxed)
      return false
    }
    if let counters, !counters.reserveRequestBytes(count) {
      machine.releaseRequestBytes(count)
      counters.budgetResets.add(1, ordering: .relaxed)
      return false
    }
    return true
  }

  /// Returns request bytes reserved with ``reserveRequestBytes(_:)``.
  func releaseRequestBytes(_ count: Int) {
    guard count != 0 else { return }
    machine.releaseRequestBytes(count)
    counters?.bufferedRequestBytes.subtract(count, ordering: .relaxed)
  }

  /// Counts reply bytes a handler wrote in the transport's budget of reply bytes in flight; they
  /// are released as the socket takes bytes, when their stream is reset before they are sent,
  /// or when the connection closes.
  func chargeReplyBytes(_ count: Int) {
    guard count > 0 else { return }
    replyBytesCharged += count
    counters?.chargeReplyBytes(count)
  }

  /// Releases up to `count` of the charged reply bytes (bytes written to the socket count as
  /// reply bytes: frame headers and TLS records make the release a little early, never late).
  private func releaseReplyBytes(_ count: Int) {
    let n = min(count, replyBytesCharged)
    guard n > 0 else { return }
    replyBytesCharged -= n
    counters?.releaseReplyBytes(n)
  }

  /// Has the owner handle the session's events, and releases the reply bytes of streams that
  /// closed with replies unsent.
  private func processEvents() {
    owner?.processEvents()
    releaseReplyBytes(session.takeDroppedOutboundBytes())
    let resets = session.takeUnsendableHeaderResets()
    if resets > 0 { counters?.unsendableHeaderResets.add(resets, ordering: .relaxed) }
  }

  /// The peer sent a PING.
  func pingReceived() {
    perform(machine.pingReceived(now: loop.now, sentDataOrHeaders: session.takeSentDataOrHeaders()))
  }

  /// The peer acknowledged our PING.
  func pingAckReceived() {
    machine.pingAckReceived()
  }

  /// The peer sent GOAWAY: the connection closes once its streams are done.
  func goawayReceived() {
    perform(machine.goawayReceived())
  }

  /// Sends GOAWAY; open streams may finish within `grace`, then the connection closes.
  func beginShutdown(grace: Duration) {
    guard !closed else { return }
    perform(machine.shutdownRequested(now: loop.now, grace: grace))
    rearmTimer()
  }

  /// Whether GOAWAY was sent or received.
  var isDraining: Bool { machine.isDraining }

  /// Sends GOAWAY `max_connections` and closes at once: an idle connection evicted at the
  /// server's connection cap.
  func evict() {
    guard !closed else { return }
    session.submitGoaway(errorCode: H2ErrorCode.noError, debug: "max_connections")
    flushNow()
    close(.local)
  }

  // MARK: The connection management's actions

  private func perform(_ action: ConnectionStateMachine.Action) {
    switch action {
    case .none:
      return
    case .sendPing:
      session.submitPing()
      scheduleFlush()
    case .goaway(let reason):
      counters?.goaway(reason)
      session.submitGoaway(errorCode: H2ErrorCode.noError, debug: reason.debugData)
      scheduleFlush()
    case .goawayTooManyPings:
      session.submitGoaway(errorCode: H2ErrorCode.enhanceYourCalm, debug: "too_many_pings")
      closeAfterFlush(.tooManyPings)
    case .close(let reason):
      closeAfterFlush(reason)
    }
  }

  private func closeAfterFlush(_ reason: ConnectionStateMachine.CloseReason) {
    owner?.connectionWillClose(reason)
    flushNow()
    close(.management(reason))
  }

  private func rearmTimer() {
    guard !closed, let deadline = machine.nextDeadline else { return }
    // One timer per connection: a deadline that moved later lets the armed one fire early and
    // find nothing due (events that push deadlines later, like every read, then cost nothing).
    if let armedAt, armedAt <= deadline { return }
    if let timer { loop.cancelTimer(timer) }
    armedAt = deadline
    timer = loop.schedule(at: deadline) { [weak self] in self?.timerFired() }
  }

  private func timerFired() {
    timer = nil
    armedAt = nil
    guard !closed else { return }
    perform(machine.timerFired(now: loop.now))
    rearmTimer()
  }

  // MARK: I/O

  func handleEvents(readable: Bool, writable: Bool, hangup: Bool) {
    if !connected { return finishConnecting(writable: writable, hangup: hangup) }
    if writable {
      writePending()
      // A socket that takes part of the output and fills again is still moving.
      if !closed && waitingForWritable { noteWriteProgress(drained: false) }
    }
    if closed { return }
    if readable && !waitingForWritable {
      readAvailable()
    } else if hangup {
      close(.peerClosed)
    }
  }

  private func finishConnecting(writable: Bool, hangup: Bool) {
    guard writable || hangup else { return }
    var error: Int32 = 0
    var length = socklen_t(MemoryLayout<Int32>.size)
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length)
    if error != 0 || hangup { return close(.connectFailed(error)) }
    connected = true
    waitingForWritable = false
    loop.modify(fd: fd, events: Epoll.input, token: token)
    if let tls {
      // Send the ClientHello; the connection is established when the handshake completes.
      if case .failed(let reason) = tls.handshake() { return close(.tlsFailed(reason)) }
      scheduleFlush()
      return
    }
    owner?.connectionEstablished()
    scheduleFlush()
  }

  private func readAvailable() {
    let buffer = loop.readBuffer
    for _ in 0..<4 {
      let n = recv(fd, buffer.baseAddress, buffer.count, 0)
      if n > 0 {
        machine.bytesRead(now: loop.now)
        let input = UnsafeRawBufferPointer(start: buffer.baseAddress, count: n)
        if let tls {
          guard receiveTLS(input, tls) else { return }
        } else {
          guard receivePlaintext(input) else { return }
        }
        if closed || n < buffer.count { break }
      } else if n == 0 {
        return close(.peerClosed)
      } else {
        if errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR { break }
        return close(.readFailed)
      }
    }
    scheduleFlush()
  }

  /// Feeds bytes to the session; false when the connection closed.
  private func receivePlaintext(_ input: UnsafeRawBufferPointer) -> Bool {
    do {
      try session.receive(input)
    } catch {
      // A protocol violation: nghttp2 has queued GOAWAY where it can; send it, then close.
      processEvents()
      flushNow()
      close(.protocolError(error))
      return false
    }
    processEvents()
    return !closed
  }

  /// Feeds ciphertext to TLS, advances the handshake, and the session with what it decrypts. A
  /// failed handshake (garbage, no ALPN h2, a bad certificate) closes this connection only, after
  /// sending the alert. Returns false when the connection closed.
  private func receiveTLS(_ input: UnsafeRawBufferPointer, _ tls: TLSConnection) -> Bool {
    guard tls.feed(input) else {
      close(.tlsFailed("out of memory"))
      return false
    }
    if !tls.handshakeComplete {
      switch tls.handshake() {
      case .pending:
        scheduleFlush()
        return true
      case .failed(let reason):
        tls.takeOutput(appendingTo: &output)
        writePending()
        close(.tlsFailed(reason))
        return false
      case .complete:
        guard tls.negotiatedH2 else {
          close(.tlsFailed("the peer did not negotiate HTTP/2 (ALPN h2)"))
          return false
        }
        owner?.connectionEstablished()
        if closed { return false }
        scheduleFlush()
      }
    }
    // The input buffer has been copied into TLS: reuse it for the plaintext.
    let buffer = loop.readBuffer
    while true {
      switch tls.read(into: buffer) {
      case .bytes(let n):
        guard receivePlaintext(UnsafeRawBufferPointer(start: buffer.baseAddress, count: n)) else { return false }
      case .wantMore:
        return true
      case .closed:
        close(.peerClosed)
        return false
      case .failed(let reason):
        close(.tlsFailed(reason))
        return false
      }
    }
  }

  /// Flushes the session's output at the end of this loop iteration (one `send` per wake-up).
  func scheduleFlush() {
    guard !flushScheduled, !closed, connected else { return }
    flushScheduled = true
    loop.deferUntilEndOfIteration { [self] in
      flushScheduled = false
      flushNow()
    }
  }

  /// Moves nghttp2's output to the socket until it has nothing more or the socket is full.
  func flushNow() {
    var rounds = 0
    var drained = false
    while !closed && connected && !waitingForWritable && rounds < 16 {
      rounds += 1
      do {
        if let tls {
          if tls.handshakeComplete {
            plaintext.removeAll(keepingCapacity: true)
            try session.send(into: &plaintext, limit: highWater)
            if !plaintext.isEmpty, let reason = tls.write(plaintext) { return close(.tlsFailed(reason)) }
          }
          tls.takeOutput(appendingTo: &output)
        } else {
          try session.send(into: &output, limit: highWater)
        }
      } catch {
        return close(.protocolError(error))
      }
      processEvents()
      if output.count == outputOffset {
        drained = true
        break
      }
      writePending()
    }
    guard !closed else { return }
    noteWriteProgress(drained: drained)
    checkDone()
    rearmTimer()
  }

  /// Tells the machine whether output is stuck: waiting for the socket, or replies queued that
  /// nghttp2 cannot send (`drained`: it had nothing more to give) because the peer's flow-control
  /// windows are closed. Output that moved since the last check restarts the stall's clock.
  private func noteWriteProgress(drained: Bool) {
    let progress = session.dataBytesSent &+ bytesWritten
    let moved = progress != progressAtCheck
    progressAtCheck = progress
    // Replies held only by streams whose own windows are closed, while the connection's is open,
    // are not the connection's stall: the peer reads it (paced streams time out alone).
    let blocked =
      waitingForWritable || (drained && session.pendingOutboundBytes > 0 && session.connectionSendWindow <= 0)
    let wasStalled = machine.isWriteStalled
    if wasStalled && (moved || !blocked) { machine.writeProgressed() }
    if blocked && !machine.isWriteStalled { machine.writeStalled(now: loop.now) }
    if wasStalled != machine.isWriteStalled {
      counters?.stalledConnections.add(wasStalled ? -1 : 1, ordering: .relaxed)
    }
  }

  private func writePending() {
    while outputOffset < output.count {
      let n = output.withUnsafeBytes { bytes in
        send(fd, bytes.baseAddress! + outputOffset, bytes.count - outputOffset, Int32(MSG_NOSIGNAL))
      }
      if n > 0 {
        outputOffset += n
        bytesWritten &+= UInt64(n)
        releaseReplyBytes(n)
      } else if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        if errno == EINTR { continue }
        if !waitingForWritable {
          // Not reading is the backpressure: a peer that does not read gets no more service.
          waitingForWritable = true
          loop.modify(fd: fd, events: Epoll.output, token: token)
        }
        return
      } else {
        return close(.writeFailed)
      }
    }
    output.removeAll(keepingCapacity: output.capacity <= 4 * highWater)
    outputOffset = 0
    if waitingForWritable {
      waitingForWritable = false
      loop.modify(fd: fd, events: Epoll.input, token: token)
      scheduleFlush()
    }
  }

  /// Closes a connection whose work is done: both sides finished the session, or it drains and
  /// its last stream has closed.
  private func checkDone() {
    guard outputOffset == output.count, !session.wantsWrite else { return }
    if !session.wantsRead { return close(.sessionFinished) }
    if case .close(let reason) = machine.drainedAction() { close(.management(reason)) }
  }

  /// Closes the socket; the owner hears of it through ``ConnectionPumpOwner/connectionClosed(_:)``.
  func close(_ outcome: ConnectionPumpOutcome) {
    guard !closed else { return }
    closed = true
    loop.unregister(fd: fd, token: token)
    Glibc.close(fd)
    if let timer { loop.cancelTimer(timer) }
    if machine.isWriteStalled { counters?.stalledConnections.subtract(1, ordering: .relaxed) }
    releaseReplyBytes(replyBytesCharged)
    if case .management(let reason) = outcome { counters?.closed(reason) }
    owner?.connectionClosed(outcome)
  }
}
