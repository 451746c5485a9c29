public import RPCCore

/// Reads the request messages of a Connect or gRPC-Web call from body bytes that arrive in pieces
/// of any size; both listeners feed it as the body arrives, so streaming requests are read
/// incrementally (full duplex over HTTP/2).
///
/// - Connect unary: the whole body is the one message; it is returned once the body ends
///   (``finish()``), and a body longer than the limit fails as soon as it is exceeded. With gzip
///   (`content-encoding`), a non-empty body is inflated when it is returned.
/// - Connect streaming and gRPC-Web: 5-byte envelopes (flags, big-endian length). Requests carry
///   flags 0, or 1 (compressed) when gzip was negotiated (`connect-content-encoding`,
///   `grpc-encoding`); a compressed flag without it is refused, as are Connect's end-stream flag,
///   gRPC-Web's trailer flag and reserved bits.
/// - gRPC-Web text: the body is base64 (each piece may end with padding), decoded as it arrives.
///
/// ```swift
/// var deframer = RequestDeframer(format: format, maxMessageSize: 4 << 20)
/// try deframer.append(chunk)
/// while let message = try deframer.next() { requests.yield(message) }
/// try deframer.finish()                      // at the end of the body
/// while let message = try deframer.next() { requests.yield(message) }
/// ```
///
/// Errors are the ``RPCError`` to answer with: `RESOURCE_EXHAUSTED` for a message over the limit
/// (compressed or inflated: the inflated size is checked while inflating, so a decompression bomb
/// costs at most the limit), `INTERNAL` for broken framing (as gRPC answers), `INTERNAL` for bad
/// base64, and for gzip that does not inflate `INVALID_ARGUMENT` (Connect, as connect-go) or
/// `INTERNAL` (gRPC-Web and gRPC, as grpc-go).
public struct RequestDeframer: Sendable {
  /// The call's format.
  public let format: CallFormat
  /// The largest message accepted, in bytes.
  public let maxMessageSize: Int
  /// The compression of the request's messages, from ``RequestHead/compression``.
  public let compression: CompressionAlgorithm
  private var buffer: [UInt8] = []
  private var start = 0
  private var ended = false
  private var bareReturned = false
  private var text = Base64StreamDecoder()

  /// Creates a deframer.
  ///
  /// - Parameters:
  ///   - format: The call's format (any framing but ``Framing/grpc``, which the gRPC path reads with
  ///     `GRPCDeframer`; it is read here like gRPC-Web's binary form).
  ///   - maxMessageSize: The largest message accepted, in bytes, compressed and inflated.
  ///   - compression: The request's message compression, ``RequestHead/compression``.
  public init(format: CallFormat, maxMessageSize: Int, compression: CompressionAlgorithm = .identity) {
    self.format = format
    self.maxMessageSize = maxMessageSize
    self.compression = compression
  }

  /// The bytes held and not yet returned as messages (for a connection's buffer budget).
  public var bufferedByteCount: Int { buffer.count - start + text.pendingCount }

  /// Adds body bytes.
  ///
  /// - Throws: ``RPCError``: `RESOURCE_EXHAUSTED` when a Connect unary body exceeds the limit,
  ///   `INTERNAL` for malformed base64 in a gRPC-Web text body.
  public mutating func append<Bytes: Collection>(_ bytes: Bytes) throws(RPCError) where Bytes.Element == UInt8 {
    if start > 0 && (start == buffer.count || start >= 4096 && start * 2 >= buffer.count) {
      // Drop what was read, so that a long stream whose pieces always end inside an envelope does
      // not keep every byte it ever received.
      buffer.removeSubrange(0..<start)
      start = 0
    }
    if format.framing == .grpcWebText {
      guard text.decode(bytes, into: &buffer) else {
        throw RPCError(code: .internal, message: "grpc-web-text: the request body is not base64")
      }
    } else {
      buffer.append(contentsOf: bytes)
    }
    if format.framing == .connectUnary, buffer.count > maxMessageSize {
      throw Self.tooLarge(buffer.count, maxMessageSize)
    }
  }

  /// Marks the end of the body; buffered messages stay readable with ``next()``.
  ///
  /// - Throws: ``RPCError`` `INTERNAL` when the body ends inside an envelope or inside a base64
  ///   quantum.
  public mutating func finish() throws(RPCError) {
    ended = true
    if format.framing == .grpcWebText, text.pendingCount > 0 {
      throw RPCError(code: .internal, message: "grpc-web-text: the request body ends inside a base64 quantum")
    }
    guard format.isEnveloped else { return }
    // Whole envelopes still buffered are read by next(); only a partial one at the end is an error.
    var offset = start
    while buffer.count - offset >= 5 {
      let total = 5 + Self.length(buffer, at: offset)
      guard buffer.count - offset >= total else { break }
      offset += total
    }
    if offset < buffer.count {
      throw RPCError(
        code: .internal,
        message: "protocol error: the request body ends inside a message envelope (\(buffer.count - offset) bytes left)")
    }
  }

  /// The next complete message, or `nil` when more bytes are needed (or none is left).
  ///
  /// - Throws: ``RPCError``: `RESOURCE_EXHAUSTED` for an envelope announcing more than the limit
  ///   or a message inflating past it, `INTERNAL` for flags a request must not carry, and for gzip
  ///   that does not inflate `INVALID_ARGUMENT` (Connect) or `INTERNAL` (gRPC-Web, gRPC).
  public mutating func next() throws(RPCError) -> [UInt8]? {
    guard format.isEnveloped else {
      guard ended, !bareReturned else { return nil }
      bareReturned = true
      let body = buffer
      buffer = []
      start = 0
      // "Servers must not attempt to decompress zero-length HTTP request content."
      return compression == .gzip && !body.isEmpty ? try inflate(body) : body
    }
    guard buffer.count - start >= 5 else { return nil }
    let flags = buffer[start]
    let compressed = flags == 1 && compression == .gzip
    if flags != 0 && !compressed {
      if flags == 1 {
        throw RPCError(
          code: .internal,
          message: format.rpcProtocol == .connect
            ? "protocol error: sent compressed message without compression support"
            : "grpc: compressed flag set with identity or empty encoding")
      }
      throw RPCError(code: .internal, message: "protocol error: invalid envelope flags \(flags) in a request")
    }
    let length = Self.length(buffer, at: start)
    guard length <= maxMessageSize else { throw Self.tooLarge(length, maxMessageSize) }
    let total = 5 + length
    guard buffer.count - start >= total else { return nil }
    let message = Array(buffer[(start + 5)..<(start + total)])
    start += total
    if start == buffer.count {
      buffer.removeAll(keepingCapacity: true)
      start = 0
    }
    return compressed && !message.isEmpty ? try inflate(message) : message
  }

  /// Inflates one gzip message within ``maxMessageSize``.
  private func inflate(_ message: [UInt8]) throws(RPCError) -> [UInt8] {
    do {
      return try Gzip.decompress(message, limit: maxMessageSize)
    } catch {
      switch error {
      case .exceedsLimit:
        throw RPCError(
          code: .resourceExhausted,
          message: "message after decompression is larger than configured max \(maxMessageSize)")
      case .corrupt(let reason):
        throw RPCError(
          code: format.rpcProtocol == .connect ? .invalidArgument : .internal,
          message: format.rpcProtocol == .connect
            ? "decompress gzip message: \(reason)" : "grpc: failed to decompress the received message: \(reason)")
      }
    }
  }

  private static func length(_ buffer: [UInt8], at offset: Int) -> Int {
    Int(buffer[offset + 1]) << 24 | Int(buffer[offset + 2]) << 16 | Int(buffer[offset + 3]) << 8
      | Int(buffer[offset + 4])
  }

  private static func tooLarge(_ size: Int, _ limit: Int) -> RPCError {
    RPCError(code: .resourceExhausted, message: "message size \(size) is larger than configured max \(limit)")
  }
}

/// Decodes base64 that arrives in pieces, where each piece may end with padding (gRPC-Web text:
/// the sender encodes each write on its own). Standard or URL-safe alphabet; whitespace is skipped.
struct Base64StreamDecoder: Sendable {
  private var quantum: (UInt8, UInt8, UInt8, UInt8) = (0, 0, 0, 0)
  private var count = 0
  private var padding = 0

  /// The characters of an incomplete quantum.
  var pendingCount: Int { count }

  /// Decodes `bytes`, appending to `out`; `false` when a character is not base64 or padding is
  /// misplaced.
  mutating func decode<Bytes: Collection>(_ bytes: Bytes, into out: inout [UInt8]) -> Bool
  where Bytes.Element == UInt8 {
    for byte in bytes {
      let value: UInt8
      switch byte {
      case 0x41...0x5A: value = byte - 0x41
      case 0x61...0x7A: value = byte - 0x61 + 26
      case 0x30...0x39: value = byte - 0x30 + 52
      case UInt8(ascii: "+"), UInt8(ascii: "-"): value = 62
      case UInt8(ascii: "/"), UInt8(ascii: "_"): value = 63
      case UInt8(ascii: "="):
        // Padding only in the last two places of a quantum.
        guard count >= 2 else { return false }
        padding += 1
        value = 0
      case UInt8(ascii: " "), UInt8(ascii: "\r"), UInt8(ascii: "\n"), UInt8(ascii: "\t"):
        continue
      default:
        return false
      }
      if padding > 0 && byte != UInt8(ascii: "=") { return false }
      switch count {
      case 0: quantum.0 = value
      case 1: quantum.1 = value
      case 2: quantum.2 = value
      default: quantum.3 = value
      }
      count += 1
      if count == 4 {
        let n = UInt32(quantum.0) << 18 | UInt32(quantum.1) << 12 | UInt32(quantum.2) << 6 | UInt32(quantum.3)
        out.append(UInt8(truncatingIfNeeded: n >> 16))
        if padding < 2 { out.append(UInt8(truncatingIfNeeded: n >> 8)) }
        if padding < 1 { out.append(UInt8(truncatingIfNeeded: n)) }
        count = 0
        padding = 0
      }
    }
    return true
  }
}
