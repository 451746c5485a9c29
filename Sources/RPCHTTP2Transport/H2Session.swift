import CLinuxShims
import CNGHTTP2
import Glibc

// The only file that calls libnghttp2. The session is driven with mem_recv/mem_send, so it is a
// pure state machine: bytes in, events out; submitted frames in, bytes out. A port to the post-1.60
// API (`nghttp2_data_provider2`, `nghttp2_ssize`) touches this file alone.

/// One header field as received or sent.
struct HeaderField {
  var name: String
  var value: String
}

/// A header block laid out once for nghttp2: the usual response headers and `OK` trailers, sent
/// for most calls. nghttp2 is told not to copy its names and values (`NGHTTP2_NV_FLAG_NO_COPY_*`)
/// and reads them until the frame is sent, so a block must outlive the sessions it is submitted
/// to (the transport's are `static`).
final class PreparedHeaderBlock: @unchecked Sendable {
  // Immutable after init; nghttp2 only reads it.
  /// The fields, as given.
  let fields: [HeaderField]
  let nameValues: UnsafeMutablePointer<nghttp2_nv>
  private let bytes: UnsafeMutablePointer<UInt8>
  /// The block's size as `SETTINGS_MAX_HEADER_LIST_SIZE` counts it (RFC 9113 § 6.5.2).
  let listSize: Int

  init(_ fields: [HeaderField]) {
    self.fields = fields
    var byteCount = 0
    var listSize = 0
    for field in fields {
      byteCount += field.name.utf8.count + field.value.utf8.count
      listSize += field.name.utf8.count + field.value.utf8.count + 32
    }
    self.listSize = listSize
    bytes = .allocate(capacity: max(1, byteCount))
    nameValues = .allocate(capacity: max(1, fields.count))
    var offset = 0
    for (index, field) in fields.enumerated() {
      let name = bytes + offset
      for byte in field.name.utf8 {
        bytes[offset] = byte
        offset += 1
      }
      let value = bytes + offset
      for byte in field.value.utf8 {
        bytes[offset] = byte
        offset += 1
      }
      (nameValues + index).initialize(
        to: nghttp2_nv(
          name: name, value: value, namelen: field.name.utf8.count, valuelen: field.value.utf8.count,
          flags: UInt8(NGHTTP2_NV_FLAG_NO_COPY_NAME.rawValue | NGHTTP2_NV_FLAG_NO_COPY_VALUE.rawValue)))
    }
  }

  deinit {
    nameValues.deallocate()
    bytes.deallocate()
  }
}

/// The HTTP/2 settings a session announces.
struct H2Settings {
  var maxConcurrentStreams: UInt32
  var initialWindowSize: UInt32
  var connectionWindowSize: Int32
  var maxHeaderListSize: UInt32
}

/// A fatal HTTP/2 error: the connection must close.
struct H2SessionError: Error, CustomStringConvertible {
  var code: Int
  var description: String { String(cString: nghttp2_strerror(Int32(truncatingIfNeeded: code))) }
}

/// HTTP/2 error codes used in RST_STREAM and GOAWAY.
enum H2ErrorCode {
  static let noError: UInt32 = 0x0
  static let protocolError: UInt32 = 0x1
  static let internalError: UInt32 = 0x2
  static let refusedStream: UInt32 = 0x7
  static let cancel: UInt32 = 0x8
  static let enhanceYourCalm: UInt32 = 0xB
}

/// A libnghttp2 session owned by one thread.
final class H2Session {
  /// Something the peer did, reported after `receive` or `send`.
  enum Event {
    /// A complete header block (request or response headers, or trailers): its fields are
    /// `receivedFields[fields]`.
    case headers(streamID: Int32, fields: Range<Int>, endStream: Bool)
    /// A chunk of DATA payload: `receivedData[bytes]`.
    case data(streamID: Int32, bytes: Range<Int>)
    /// A DATA frame ended the peer's side of the stream.
    case endStream(streamID: Int32)
    /// The stream is closed; `errorCode` is non-zero after RST_STREAM or a protocol error.
    case streamClosed(streamID: Int32, errorCode: UInt32)
    /// The peer sent a PING (already acknowledged by nghttp2).
    case ping
    /// The peer acknowledged our PING.
    case pingAck
    /// The peer sent GOAWAY.
    case goaway(lastStreamID: Int32, errorCode: UInt32)
    /// The peer sent SETTINGS (not an acknowledgement): for a server, the client's preface is done.
    case settings
  }

  /// The bytes still to send on one stream, and how the stream ends.
  private final class Outbound {
    var bytes: [UInt8] = []
    var offset = 0
    /// The gRPC prefix (flag 0, 4-byte length) sent before ``bytes`` when they are one message
    /// handed over as it is (``H2Session/submitResponse(streamID:headers:message:)``): the reply
    /// is framed without copying the message into a new body.
    var prefix: (UInt8, UInt8, UInt8, UInt8, UInt8) = (0, 0, 0, 0, 0)
    var prefixLength = 0
    var prefixOffset = 0
    var trailers: [HeaderField]?
    var preparedTrailers: PreparedHeaderBlock?
    var endStream = false
    var deferred = false
    var done = false

    /// Makes a closed stream's state new again, for ``H2Session/spareOutbounds``.
    func reset() {
      bytes = []
      offset = 0
      prefixLength = 0
      prefixOffset = 0
      trailers = nil
      preparedTrailers = nil
      endStream = false
      deferred = false
      done = false
    }

    /// The bytes queued and not yet taken by nghttp2.
    var unsent: Int { prefixLength - prefixOffset + bytes.count - offset }
  }

  private var session: OpaquePointer?
  /// nghttp2's allocator for this session: its per-stream blocks (the stream, outbound items,
  /// copied header arrays) are kept on free lists when freed, for the next streams, instead of
  /// going back to malloc (see `clinux_pool_create`).
  private let pool: OpaquePointer?
  private let maxHeaderListSize: Int
  // nghttp2 delivers one header block at a time (CONTINUATION frames are contiguous), so the
  // fields of the block in progress need no per-stream table.
  private var blockStreamID: Int32 = 0
  private var blockStart = 0
  private var blockBytes = 0
  private var blockRejected = false
  /// The header fields of the events not yet processed, one block after another; a `.headers`
  /// event names its block's range. One array for all blocks (emptied, keeping its capacity, when
  /// the next bytes arrive after the events were taken) instead of an array per block.
  private(set) var receivedFields: [HeaderField] = []
  /// The DATA payload of the events not yet processed, chunk after chunk, named by `.data` events'
  /// ranges; emptied like ``receivedFields``.
  private(set) var receivedData: [UInt8] = []
  /// Header names and values of more than 15 bytes seen recently (the request path, the content
  /// type, the user agent: the same on every call of a connection), so that a repeated one costs
  /// a comparison instead of a new string (shorter strings are stored inline, without allocating).
  private var recentStrings: [String] = []
  private var recentStringsNext = 0
  private var outbound = StreamTable<Outbound>()
  /// The outbound states of closed streams, reset, for the next streams (one allocation fewer
  /// per call).
  private var spareOutbounds: [Outbound] = []
  /// Events since the last `takeEvents()`.
  private(set) var events: [Event] = []
  /// The storage of the events taken before, emptied (``recycleEvents(_:)``).
  private var spareEvents: [Event] = []
  /// Whether a DATA or HEADERS frame was sent since the last ``takeSentDataOrHeaders()``.
  private var sentDataOrHeaders = false
  /// The DATA payload bytes sent since the session began.
  private(set) var dataBytesSent: UInt64 = 0
  /// The DATA bytes queued on streams that nghttp2 has not taken yet (replies waiting for the
  /// socket or for the peer's flow-control window).
  private(set) var pendingOutboundBytes = 0
  /// Queued DATA bytes dropped because their stream closed first (reset), since the last
  /// ``takeDroppedOutboundBytes()``.
  private var droppedOutboundBytes = 0
  /// The streams whose response headers or trailers could not be sent (nghttp2 refused the block:
  /// over ``maxSendHeaderBlockLength``, over the peer's `SETTINGS_MAX_HEADER_LIST_SIZE`, or a
  /// failed submission), to reset before the next frames go out: nghttp2 itself leaves such a
  /// stream open, holding its call, for ever.
  private var unsendableHeaderStreams: [Int32] = []
  /// The streams reset by ``unsendableHeaderStreams`` since the last
  /// ``takeUnsendableHeaderResets()``.
  private var unsendableHeaderResets = 0

  /// The largest header block (HPACK-compressed) nghttp2 sends: 64 KiB. A larger one is not sent
  /// and its stream is reset (``StatusBounds`` keeps a status's trailers far below it).
  static let maxSendHeaderBlockLength = 64 << 10

  /// Creates a server or client session and queues its SETTINGS.
  ///
  /// With `manualWindowUpdates`, received DATA reopens the flow-control windows only once it is
  /// given back with ``consume(streamID:count:)``, ``consumeConnection(count:)`` and
  /// ``consumeStream(streamID:count:)`` (a client's backpressure on response streams).
  init(isServer: Bool, settings: H2Settings, manualWindowUpdates: Bool = false) {
    maxHeaderListSize = Int(settings.maxHeaderListSize)
    pool = clinux_pool_create(Self.poolCachedBytes)
    var callbacks: OpaquePointer?
    nghttp2_session_callbacks_new(&callbacks)
    defer { nghttp2_session_callbacks_del(callbacks) }
    nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks) { _, frame, userData in
      let session = Unmanaged<H2Session>.fromOpaque(userData!).takeUnretainedValue()
      session.blockStreamID = frame!.pointee.hd.stream_id
      session.blockStart = session.receivedFields.count
      session.blockBytes = 0
      session.blockRejected = false
      return 0
    }
    nghttp2_session_callbacks_set_on_header_callback(callbacks) {
      _, frame, name, nameLength, value, valueLength, _, userData in
      let session = Unmanaged<H2Session>.fromOpaque(userData!).takeUnretainedValue()
      return session.onHeader(
        streamID: frame!.pointee.hd.stream_id, name: UnsafeBufferPointer(start: name, count: nameLength),
        value: UnsafeBufferPointer(start: value, count: valueLength))
    }
    nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks) { _, frame, userData in
      let session = Unmanaged<H2Session>.fromOpaque(userData!).takeUnretainedValue()
      session.onFrame(frame!)
      return 0
    }
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks) {
      _, _, streamID, data, length, userData in
      let session = Unmanaged<H2Session>.fromOpaque(userData!).takeUnretainedValue()
      let start = session.receivedData.count
      session.receivedData.append(contentsOf: UnsafeBufferPointer(start: data, count: length))
      session.events.append(.data(streamID: streamID, bytes: start..<session.receivedData.count))
      return 0
    }
    nghttp2_session_callbacks_set_on_stream_close_callback(callbacks) { _, streamID, errorCode, userData in
      let session = Unmanaged<H2Session>.fromOpaque(userData!).takeUnretainedValue()
      if let ob = session.outbound.removeValue(forKey: streamID) {
        let unsent = ob.unsent
        session.pendingOutboundBytes -= unsent
        session.droppedOutboundBytes += unsent
        if session.spareOutbounds.count < 64 {
          ob.reset()
          session.spareOutbounds.append(ob)
        }
      }
      session.events.append(.streamClosed(streamID: streamID, errorCode: errorCode))
      return 0
    }
    nghttp2_session_callbacks_set_on_frame_not_send_callback(callbacks) { _, frame, _, userData in
      // A HEADERS frame of ours that nghttp2 could not send (a block over the length limit, a
      // compression failure): the stream would stay open with no end; it is reset instead.
      // (A client's refused request HEADERS are closed by nghttp2 itself.)
      let header = frame!.pointee.hd
      if UInt32(header.type) == NGHTTP2_HEADERS.rawValue, header.stream_id > 0,
        frame!.pointee.headers.cat != NGHTTP2_HCAT_REQUEST
      {
        let session = Unmanaged<H2Session>.fromOpaque(userData!).takeUnretainedValue()
        session.unsendableHeaderStreams.append(header.stream_id)
      }
      return 0
    }
    nghttp2_session_callbacks_set_on_frame_send_callback(callbacks) { _, frame, userData in
      let type = UInt32(frame!.pointee.hd.type)
      if type == NGHTTP2_DATA.rawValue || type == NGHTTP2_HEADERS.rawValue {
        let session = Unmanaged<H2Session>.fromOpaque(userData!).takeUnretainedValue()
        session.sentDataOrHeaders = true
        if type == NGHTTP2_DATA.rawValue { session.dataBytesSent &+= UInt64(frame!.pointee.hd.length) }
      }
      return 0
    }
    var option: OpaquePointer?
    nghttp2_option_new(&option)
    defer { nghttp2_option_del(option) }
    nghttp2_option_set_max_send_header_block_length(option, Self.maxSendHeaderBlockLength)
    if manualWindowUpdates { nghttp2_option_set_no_auto_window_update(option, 1) }
    // RFC 7540's priority tree (deprecated by RFC 9113, unused by gRPC) made nghttp2 keep every
    // closed stream around for re-prioritisation; closed streams are freed at once instead.
    nghttp2_option_set_no_closed_streams(option, 1)
    let userData = Unmanaged.passUnretained(self).toOpaque()
    // nghttp2 copies the struct; the pool lives until after `nghttp2_session_del`. Without a
    // pool (out of memory) nghttp2 uses malloc.
    var mem = nghttp2_mem(
      mem_user_data: UnsafeMutableRawPointer(pool), malloc: clinux_pool_malloc, free: clinux_pool_free,
      calloc: clinux_pool_calloc, realloc: clinux_pool_realloc)
    var created: OpaquePointer?
    withUnsafeMutablePointer(to: &mem) { mem in
      let memory = pool == nil ? nil : mem
      if isServer {
        nghttp2_session_server_new3(&created, callbacks, userData, option, memory)
      } else {
        nghttp2_session_client_new3(&created, callbacks, userData, option, memory)
      }
    }
    session = created
    var entries = [
      nghttp2_settings_entry(
        settings_id: Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue), value: settings.maxConcurrentStreams),
      nghttp2_settings_entry(
        settings_id: Int32(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE.rawValue), value: settings.initialWindowSize),
      nghttp2_settings_entry(
        settings_id: Int32(NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE.rawValue), value: settings.maxHeaderListSize),
    ]
    if isServer {
      // RFC 9218: the server does not use RFC 7540 priorities (nghttp2 then keeps no priority
      // tree per stream); a client that does not know the setting ignores it.
      entries.append(
        nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES.rawValue), value: 1))
    } else {
      entries.removeFirst()
    }
    nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), &entries, entries.count)
    nghttp2_session_set_local_window_size(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0, settings.connectionWindowSize)
  }

  deinit {
    nghttp2_session_del(session)
    clinux_pool_destroy(pool)
  }

  /// The freed nghttp2 blocks a session keeps for reuse, at most: enough for the streams of a
  /// busy connection (about 1 KiB each while open), small beside the connection's buffers.
  static let poolCachedBytes = 64 << 10

  /// Whether DATA or HEADERS went out since the last call (grpc-go resets ping strikes then).
  func takeSentDataOrHeaders() -> Bool {
    defer { sentDataOrHeaders = false }
    return sentDataOrHeaders
  }

  /// The queued DATA bytes dropped with their streams since the last call (a reset stream's
  /// unsent reply), for the server's budget of reply bytes in flight.
  func takeDroppedOutboundBytes() -> Int {
    defer { droppedOutboundBytes = 0 }
    return droppedOutboundBytes
  }

  /// The streams reset since the last call because their headers or trailers could not be sent.
  func takeUnsendableHeaderResets() -> Int {
    defer { unsendableHeaderResets = 0 }
    return unsendableHeaderResets
  }

  /// Returns and clears the collected events. Give the array back with ``recycleEvents(_:)``
  /// once processed, so that the next events reuse its storage instead of a new allocation.
  func takeEvents() -> [Event] {
    var taken = spareEvents
    spareEvents = []
    swap(&taken, &events)
    return taken
  }

  /// Takes back an array that ``takeEvents()`` returned, emptied, for the next events.
  func recycleEvents(_ taken: inout [Event]) {
    taken.removeAll(keepingCapacity: taken.capacity <= 1024)
    spareEvents = taken
    taken = []
  }

  /// Feeds received bytes.
  ///
  /// - Throws: ``H2SessionError`` when the connection must close (bad preface, flood, protocol).
  func receive(_ bytes: UnsafeRawBufferPointer) throws(H2SessionError) {
    guard let base = bytes.baseAddress, bytes.count > 0 else { return }
    if events.isEmpty {
      // The events that named these fields and bytes have been taken and processed; the fields
      // of a header block still arriving (split over reads) stay.
      if blockStreamID != 0 {
        receivedFields.removeSubrange(..<blockStart)
        blockStart = 0
      } else {
        receivedFields.removeAll(keepingCapacity: receivedFields.capacity <= 256)
      }
      receivedData.removeAll(keepingCapacity: receivedData.capacity <= 64 << 10)
    }
    let n = nghttp2_session_mem_recv(session, base.assumingMemoryBound(to: UInt8.self), bytes.count)
    if n < 0 { throw H2SessionError(code: n) }
  }

  /// Appends serialized frames to `buffer` until nghttp2 has nothing more or `limit` is reached.
  ///
  /// - Throws: ``H2SessionError`` on a fatal session error.
  func send(into buffer: inout [UInt8], limit: Int) throws(H2SessionError) {
    while buffer.count < limit {
      var pointer: UnsafePointer<UInt8>?
      let n = nghttp2_session_mem_send(session, &pointer)
      if n < 0 { throw H2SessionError(code: n) }
      if n > 0 { buffer.append(contentsOf: UnsafeBufferPointer(start: pointer, count: n)) }
      // Header blocks refused during this call: their streams are reset now (RST_STREAM goes out
      // in the next round), so that they close and release what they hold.
      if !unsendableHeaderStreams.isEmpty {
        resetUnsendableHeaderStreams()
        continue
      }
      if n == 0 { return }
    }
  }

  private func resetUnsendableHeaderStreams() {
    let streams = unsendableHeaderStreams
    unsendableHeaderStreams.removeAll()
    for streamID in streams {
      // A stream the peer already closed (its block was dropped for that reason) needs nothing.
      guard let stream = nghttp2_session_find_stream(session, streamID),
        nghttp2_stream_get_state(stream) != NGHTTP2_STREAM_STATE_CLOSED,
        nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), streamID, H2ErrorCode.internalError) == 0
      else { continue }
      unsendableHeaderResets += 1
    }
  }

  /// Whether a header block fits the peer's `SETTINGS_MAX_HEADER_LIST_SIZE` (RFC 9113 § 6.5.2:
  /// each field counts its name's and value's lengths plus 32; unlimited unless the peer set it).
  private func fitsPeerHeaderList(_ fields: [HeaderField]) -> Bool {
    let peerLimit = Int(nghttp2_session_get_remote_settings(session, NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE))
    var size = 0
    for field in fields { size += field.name.utf8.count + field.value.utf8.count + 32 }
    return size <= peerLimit
  }

  /// Whether a prepared header block fits the peer's `SETTINGS_MAX_HEADER_LIST_SIZE`.
  private func fitsPeerHeaderList(_ block: PreparedHeaderBlock) -> Bool {
    block.listSize <= Int(nghttp2_session_get_remote_settings(session, NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE))
  }

  /// Whether the session wants to read more.
  var wantsRead: Bool { nghttp2_session_want_read(session) != 0 }
  /// Whether the session has frames to send.
  var wantsWrite: Bool { nghttp2_session_want_write(session) != 0 }
  /// The highest stream id the session has processed (for GOAWAY).
  var lastProcessedStreamID: Int32 { nghttp2_session_get_last_proc_stream_id(session) }

  /// Submits response headers. With `body == nil` the header block ends the stream (Trailers-Only
  /// or an HTTP error); otherwise DATA follows from ``sendData(streamID:bytes:)`` and the stream
  /// ends with ``sendTrailers(streamID:_:)``.
  ///
  /// A block that cannot be sent (over the peer's `SETTINGS_MAX_HEADER_LIST_SIZE`, or refused by
  /// nghttp2 now or when it comes to send it) resets the stream with `INTERNAL_ERROR` instead, as
  /// grpc-go does: the stream then closes, never left open.
  ///
  /// - Returns: Whether the block was submitted.
  @discardableResult
  func submitResponse(streamID: Int32, headers: [HeaderField], body: [UInt8]?) -> Bool {
    let submitted: Bool
    if let body {
      // Queued even when the block cannot go: the reset drops these bytes as any reset stream's
      // (``takeDroppedOutboundBytes()``), so the owner's count of reply bytes stays right.
      let ob = spareOutbounds.popLast() ?? Outbound()
      ob.bytes = body
      outbound[streamID] = ob
      pendingOutboundBytes += body.count
      var provider = Self.provider
      submitted =
        fitsPeerHeaderList(headers)
        && withNameValues(headers) { nghttp2_submit_response(session, streamID, $0, $1, &provider) } == 0
    } else {
      submitted =
        fitsPeerHeaderList(headers)
        && withNameValues(headers) { nghttp2_submit_response(session, streamID, $0, $1, nil) } == 0
    }
    if !submitted { unsendableHeaderStreams.append(streamID) }
    return submitted
  }

  /// Submits response headers followed by one uncompressed gRPC message, framed as it is sent
  /// (its prefix first, then its bytes, not copied into a body); more DATA may follow from
  /// ``sendData(streamID:bytes:)``, and ``sendTrailers(streamID:_:)`` ends the stream.
  ///
  /// - Returns: Whether the block was submitted (see ``submitResponse(streamID:headers:body:)``).
  @discardableResult
  func submitResponse(streamID: Int32, headers: [HeaderField], message: [UInt8]) -> Bool {
    let ob = spareOutbounds.popLast() ?? Outbound()
    let n = UInt32(truncatingIfNeeded: message.count)
    ob.prefix = (0, UInt8(truncatingIfNeeded: n >> 24), UInt8(truncatingIfNeeded: n >> 16), UInt8(truncatingIfNeeded: n >> 8), UInt8(truncatingIfNeeded: n))
    ob.prefixLength = 5
    ob.bytes = message
    outbound[streamID] = ob
    pendingOutboundBytes += ob.unsent
    var provider = Self.provider
    let submitted =
      fitsPeerHeaderList(headers)
      && withNameValues(headers) { nghttp2_submit_response(session, streamID, $0, $1, &provider) } == 0
    if !submitted { unsendableHeaderStreams.append(streamID) }
    return submitted
  }

  /// Submits a prepared block of response headers followed by one uncompressed gRPC message, as
  /// ``submitResponse(streamID:headers:message:)`` does with fields.
  @discardableResult
  func submitResponse(streamID: Int32, headers: PreparedHeaderBlock, message: [UInt8]) -> Bool {
    let ob = spareOutbounds.popLast() ?? Outbound()
    let n = UInt32(truncatingIfNeeded: message.count)
    ob.prefix = (0, UInt8(truncatingIfNeeded: n >> 24), UInt8(truncatingIfNeeded: n >> 16), UInt8(truncatingIfNeeded: n >> 8), UInt8(truncatingIfNeeded: n))
    ob.prefixLength = 5
    ob.bytes = message
    outbound[streamID] = ob
    pendingOutboundBytes += ob.unsent
    var provider = Self.provider
    let submitted =
      fitsPeerHeaderList(headers)
      && nghttp2_submit_response(session, streamID, headers.nameValues, headers.fields.count, &provider) == 0
    if !submitted { unsendableHeaderStreams.append(streamID) }
    return submitted
  }

  /// Submits a request whose body is `body`, ending the stream after it.
  ///
  /// - Returns: The new stream id, or `nil` when the session cannot open a stream now.
  func submitRequest(headers: [HeaderField], body: [UInt8]) -> Int32? {
    let ob = spareOutbounds.popLast() ?? Outbound()
    ob.bytes = body
    ob.endStream = true
    var provider = Self.provider
    let id = withNameValues(headers) { nghttp2_submit_request(session, nil, $0, $1, &provider, nil) }
    guard id > 0 else { return nil }
    outbound[id] = ob
    pendingOutboundBytes += body.count
    return id
  }

  /// Appends bytes to a stream's outgoing DATA.
  func sendData(streamID: Int32, bytes: [UInt8]) {
    guard let ob = outbound[streamID], !ob.done else { return }
    ob.bytes.append(contentsOf: bytes)
    pendingOutboundBytes += bytes.count
    resumeIfDeferred(streamID, ob)
  }

  /// Ends a stream with trailers after its pending DATA.
  func sendTrailers(streamID: Int32, _ trailers: [HeaderField]) {
    guard let ob = outbound[streamID], !ob.done else { return }
    ob.trailers = trailers
    resumeIfDeferred(streamID, ob)
  }

  /// Ends a stream with a prepared block of trailers after its pending DATA.
  func sendTrailers(streamID: Int32, _ trailers: PreparedHeaderBlock) {
    guard let ob = outbound[streamID], !ob.done else { return }
    ob.preparedTrailers = trailers
    resumeIfDeferred(streamID, ob)
  }

  /// Ends a stream after its pending DATA, with END_STREAM on the last DATA frame and no trailers
  /// (Connect and gRPC-Web carry the status in the headers or the body).
  func endStream(streamID: Int32) {
    guard let ob = outbound[streamID], !ob.done else { return }
    ob.endStream = true
    resumeIfDeferred(streamID, ob)
  }

  /// The DATA bytes the peer lets us send on the connection before it opens its window again.
  var connectionSendWindow: Int { Int(nghttp2_session_get_remote_window_size(session)) }

  /// The number of bytes a stream has queued but nghttp2 has not taken yet.
  func pendingBytes(streamID: Int32) -> Int {
    guard let ob = outbound[streamID] else { return 0 }
    return ob.unsent
  }

  private func resumeIfDeferred(_ streamID: Int32, _ ob: Outbound) {
    if ob.deferred {
      ob.deferred = false
      nghttp2_session_resume_data(session, streamID)
    }
  }

  /// Gives `count` received DATA bytes back to the stream's and the connection's windows
  /// (sessions with manual window updates; a closed stream's part is ignored).
  func consume(streamID: Int32, count: Int) {
    nghttp2_session_consume(session, streamID, count)
  }

  /// Gives `count` received DATA bytes back to the connection's window only.
  func consumeConnection(count: Int) {
    nghttp2_session_consume_connection(session, count)
  }

  /// Gives `count` received DATA bytes back to a stream's window only.
  func consumeStream(streamID: Int32, count: Int) {
    nghttp2_session_consume_stream(session, streamID, count)
  }

  /// The DATA bytes the peer may still send on a stream before its window reopens (-1 when the
  /// stream is gone).
  func receiveWindow(streamID: Int32) -> Int {
    Int(nghttp2_session_get_stream_local_window_size(session, streamID))
  }

  /// Resets a stream.
  func resetStream(streamID: Int32, errorCode: UInt32) {
    nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), streamID, errorCode)
  }

  /// Queues GOAWAY with the last processed stream id; nghttp2 then refuses newer streams.
  func submitGoaway(errorCode: UInt32, debug: String) {
    var debugBytes = Array(debug.utf8)
    nghttp2_submit_goaway(
      session, UInt8(NGHTTP2_FLAG_NONE.rawValue), lastProcessedStreamID, errorCode, &debugBytes, debugBytes.count)
  }

  /// Queues a PING.
  func submitPing() {
    nghttp2_submit_ping(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), nil)
  }

  private static let provider = nghttp2_data_provider(
    source: nghttp2_data_source(ptr: nil),
    read_callback: { _, streamID, buffer, length, flags, _, userData in
      let session = Unmanaged<H2Session>.fromOpaque(userData!).takeUnretainedValue()
      return session.readData(streamID: streamID, into: buffer!, length: length, flags: flags!)
    })

  private func readData(
    streamID: Int32, into buffer: UnsafeMutablePointer<UInt8>, length: Int, flags: UnsafeMutablePointer<UInt32>
  ) -> Int {
    guard let ob = outbound[streamID] else {
      return Int(NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue)
    }
    var written = 0
    if ob.prefixOffset < ob.prefixLength {
      written = min(ob.prefixLength - ob.prefixOffset, length)
      withUnsafeBytes(of: ob.prefix) { prefix in
        buffer.update(from: prefix.baseAddress!.assumingMemoryBound(to: UInt8.self) + ob.prefixOffset, count: written)
      }
      ob.prefixOffset += written
      pendingOutboundBytes -= written
    }
    let n = min(ob.bytes.count - ob.offset, length - written)
    if n > 0 {
      ob.bytes.withUnsafeBufferPointer { source in
        (buffer + written).update(from: source.baseAddress! + ob.offset, count: n)
      }
      ob.offset += n
      pendingOutboundBytes -= n
      if ob.offset == ob.bytes.count {
        if ob.prefixLength > 0 {
          // The handler's message (its prefix went out before it), maybe still shared: let go
          // of it rather than empty it in place, which would copy a shared buffer. What a
          // stream sends next is appended to a buffer of its own, as without a prefix.
          ob.bytes = []
          ob.prefixLength = 0
          ob.prefixOffset = 0
        } else {
          ob.bytes.removeAll(keepingCapacity: ob.bytes.count <= 64 << 10)
        }
        ob.offset = 0
      }
    }
    written += n
    if ob.unsent == 0 {
      if let trailers = ob.preparedTrailers {
        flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue | NGHTTP2_DATA_FLAG_NO_END_STREAM.rawValue
        ob.done = true
        let submitted =
          fitsPeerHeaderList(trailers)
          && nghttp2_submit_trailer(session, streamID, trailers.nameValues, trailers.fields.count) == 0
        if !submitted { unsendableHeaderStreams.append(streamID) }
      } else if let trailers = ob.trailers {
        flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue | NGHTTP2_DATA_FLAG_NO_END_STREAM.rawValue
        ob.done = true
        // Trailers that cannot go (too large for the peer, or refused by nghttp2): the stream is
        // reset after this round rather than left without an end.
        let submitted =
          fitsPeerHeaderList(trailers) && withNameValues(trailers) { nghttp2_submit_trailer(session, streamID, $0, $1) } == 0
        if !submitted { unsendableHeaderStreams.append(streamID) }
      } else if ob.endStream {
        flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue
        ob.done = true
      } else if written == 0 {
        ob.deferred = true
        return Int(NGHTTP2_ERR_DEFERRED.rawValue)
      }
    }
    return written
  }

  private func onHeader(streamID: Int32, name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>) -> Int32 {
    guard streamID == blockStreamID, !blockRejected else { return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue }
    blockBytes += name.count + value.count + 32
    if blockBytes > maxHeaderListSize {
      // The stream is reset; the rest of its header block is skipped.
      blockRejected = true
      receivedFields.removeSubrange(blockStart...)
      return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue
    }
    receivedFields.append(HeaderField(name: recentString(name), value: recentString(value)))
    return 0
  }

  /// The string of `bytes`, from ``recentStrings`` when it was seen lately.
  private func recentString(_ bytes: UnsafeBufferPointer<UInt8>) -> String {
    guard bytes.count > 15, bytes.count <= 256, let base = bytes.baseAddress else {
      return String(decoding: bytes, as: UTF8.self)
    }
    for index in recentStrings.indices where recentStrings[index].utf8.count == bytes.count {
      let same = recentStrings[index].utf8.withContiguousStorageIfAvailable { memcmp($0.baseAddress!, base, bytes.count) == 0 }
      if same == true { return recentStrings[index] }
    }
    let string = String(decoding: bytes, as: UTF8.self)
    if recentStrings.count < 8 {
      recentStrings.append(string)
    } else {
      recentStrings[recentStringsNext] = string
      recentStringsNext = (recentStringsNext + 1) % 8
    }
    return string
  }

  private func onFrame(_ frame: UnsafePointer<nghttp2_frame>) {
    let header = frame.pointee.hd
    let endStream = header.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0
    switch UInt32(header.type) {
    case NGHTTP2_HEADERS.rawValue:
      guard header.stream_id == blockStreamID, !blockRejected else { return }
      events.append(.headers(streamID: header.stream_id, fields: blockStart..<receivedFields.count, endStream: endStream))
      blockStreamID = 0
    case NGHTTP2_DATA.rawValue:
      if endStream { events.append(.endStream(streamID: header.stream_id)) }
    case NGHTTP2_PING.rawValue:
      events.append(header.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) != 0 ? .pingAck : .ping)
    case NGHTTP2_SETTINGS.rawValue:
      if header.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) == 0 { events.append(.settings) }
    case NGHTTP2_GOAWAY.rawValue:
      events.append(.goaway(lastStreamID: frame.pointee.goaway.last_stream_id, errorCode: frame.pointee.goaway.error_code))
    default:
      break
    }
  }

  /// Lays header fields out in one buffer and calls `body` with an `nghttp2_nv` array over it;
  /// nghttp2 copies the fields during the call. Both live in temporary (usually stack) storage:
  /// this runs for every response header block and trailer block.
  private func withNameValues<R>(_ fields: [HeaderField], _ body: (UnsafePointer<nghttp2_nv>, Int) -> R) -> R {
    var byteCount = 1
    for field in fields { byteCount += field.name.utf8.count + field.value.utf8.count }
    return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: byteCount) { blob in
      withUnsafeTemporaryAllocation(of: nghttp2_nv.self, capacity: max(1, fields.count)) { nvs in
        let base = blob.baseAddress!
        var offset = 0
        func copy(_ text: String) -> (UnsafeMutablePointer<UInt8>, Int) {
          var text = text
          let start = offset
          text.withUTF8 { utf8 in
            if let source = utf8.baseAddress { (base + start).update(from: source, count: utf8.count) }
            offset += utf8.count
          }
          return (base + start, offset - start)
        }
        for (index, field) in fields.enumerated() {
          let (name, nameLength) = copy(field.name)
          let (value, valueLength) = copy(field.value)
          (nvs.baseAddress! + index).initialize(
            to: nghttp2_nv(
              name: name, value: value, namelen: nameLength, valuelen: valueLength,
              flags: UInt8(NGHTTP2_NV_FLAG_NONE.rawValue)))
        }
        return body(nvs.baseAddress!, fields.count)
      }
    }
  }

}
