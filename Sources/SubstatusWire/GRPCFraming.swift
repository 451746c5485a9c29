/// The gRPC length-prefixed message framing: a 1-byte compressed flag, a 4-byte big-endian length,
/// then the message bytes (gRPC over HTTP/2, "Length-Prefixed-Message").
public enum GRPCFraming {
  /// The size of the prefix before each message.
  public static let prefixLength = 5

  /// Frames one uncompressed message.
  ///
  /// - Parameter message: The serialized message.
  /// - Returns: The prefix followed by the message.
  public static func frame(_ message: [UInt8]) -> [UInt8] {
    var out = [UInt8]()
    out.reserveCapacity(message.count + prefixLength)
    appendFrame(message, to: &out)
    return out
  }

  /// Appends one uncompressed framed message to a buffer.
  public static func appendFrame(_ message: [UInt8], to out: inout [UInt8]) {
    let n = UInt32(truncatingIfNeeded: message.count)
    out.append(0)
    out.append(UInt8(truncatingIfNeeded: n >> 24))
    out.append(UInt8(truncatingIfNeeded: n >> 16))
    out.append(UInt8(truncatingIfNeeded: n >> 8))
    out.append(UInt8(truncatingIfNeeded: n))
    out.append(contentsOf: message)
  }
}

/// Reassembles gRPC length-prefixed messages from bytes that arrive in pieces of any size.
///
/// ```swift
/// var deframer = GRPCDeframer(maxMessageLength: 4 << 20)
/// deframer.append(chunk)
/// while let message = try deframer.next() { handle(message) }
/// ```
public struct GRPCDeframer: Sendable {
  /// The largest message accepted; a longer announced length fails with `.messageTooLarge`.
  public let maxMessageLength: Int
  private var buffer: [UInt8] = []
  private var start = 0

  /// Creates a deframer.
  /// - Parameter maxMessageLength: The largest message accepted, in bytes.
  public init(maxMessageLength: Int) {
    self.maxMessageLength = maxMessageLength
  }

  /// The number of buffered bytes not yet returned as messages.
  public var bufferedByteCount: Int { buffer.count - start }

  /// Adds received bytes.
  public mutating func append<Bytes: Collection>(_ bytes: Bytes) where Bytes.Element == UInt8 {
    if start > 0 && start == buffer.count {
      buffer.removeAll(keepingCapacity: true)
      start = 0
    }
    buffer.append(contentsOf: bytes)
  }

  /// The length announced by the buffered prefix, once all five prefix bytes are here.
  public var announcedLength: Int? {
    guard buffer.count - start >= GRPCFraming.prefixLength else { return nil }
    return Int(buffer[start + 1]) << 24 | Int(buffer[start + 2]) << 16
      | Int(buffer[start + 3]) << 8 | Int(buffer[start + 4])
  }

  /// Returns the next complete message, or `nil` when more bytes are needed.
  ///
  /// - Throws: ``WireError`` with `.compressedMessage` for a compressed frame, `.messageTooLarge`
  ///   when the announced length exceeds ``maxMessageLength``, `.malformedFrame` for a flag other
  ///   than 0 or 1.
  public mutating func next() throws(WireError) -> [UInt8]? {
    guard let length = announcedLength else { return nil }
    switch buffer[start] {
    case 0: break
    case 1:
      throw WireError(code: .compressedMessage, message: "compressed gRPC message but no grpc-encoding negotiated")
    default:
      throw WireError(code: .malformedFrame, message: "gRPC frame compressed flag is \(buffer[start]), not 0 or 1")
    }
    guard length <= maxMessageLength else {
      throw WireError(
        code: .messageTooLarge,
        message: "gRPC message of \(length) bytes exceeds the limit of \(maxMessageLength) bytes")
    }
    let total = GRPCFraming.prefixLength + length
    guard buffer.count - start >= total else { return nil }
    let message = Array(buffer[(start + GRPCFraming.prefixLength)..<(start + total)])
    start += total
    if start == buffer.count {
      buffer.removeAll(keepingCapacity: true)
      start = 0
    }
    return message
  }

  /// Checks that no partial message is left at the end of a stream.
  /// - Throws: ``WireError`` with `.malformedFrame` when bytes of an incomplete frame remain.
  public func finish() throws(WireError) {
    if bufferedByteCount > 0 {
      throw WireError(
        code: .malformedFrame, message: "stream ended inside a gRPC frame (\(bufferedByteCount) bytes left)")
    }
  }
}
