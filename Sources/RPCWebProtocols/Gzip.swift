internal import CZlib

/// A message compression the server speaks: the values of `grpc-encoding`, `content-encoding` and
/// `connect-content-encoding` it understands.
public enum CompressionAlgorithm: String, Sendable, Hashable, CaseIterable {
  /// No compression.
  case identity
  /// gzip (RFC 1952), through zlib.
  case gzip

  /// Every algorithm this module reads and writes, most preferred first: gzip, identity. A
  /// transport that passes ``RequestHead/compression`` to its ``RequestDeframer`` passes this to
  /// ``RequestHead/parse(_:format:supportedCompression:)``.
  public static let supported: [CompressionAlgorithm] = [.gzip, .identity]

  /// The compression of a response: gzip when one of the accept field values lists it (see
  /// ``RequestHead/acceptsGzip(_:)``), identity when the field is there without it, and the
  /// request's own encoding when there is no accept field (the Connect specification's rule; the
  /// gRPC path may use it for `grpc-accept-encoding` too).
  ///
  /// - Parameters:
  ///   - accept: The values of the call's accept field (`accept-encoding`,
  ///     `connect-accept-encoding` or `grpc-accept-encoding`), empty when absent.
  ///   - request: The request's message encoding.
  public static func negotiated(accept: [String], request: CompressionAlgorithm) -> CompressionAlgorithm {
    guard !accept.isEmpty else { return request }
    return accept.contains(where: RequestHead.acceptsGzip) ? .gzip : .identity
  }

  /// The value of an accept field (`accept-encoding`, `connect-accept-encoding`,
  /// `grpc-accept-encoding`) naming `algorithms`: `gzip,identity`.
  public static func acceptFieldValue(_ algorithms: [CompressionAlgorithm]) -> String {
    algorithms.map(\.rawValue).joined(separator: ",")
  }
}

/// gzip through zlib: the only place in this module that touches C and unsafe pointers.
///
/// ```swift
/// let packed = Gzip.compress(message)                       // nil only when zlib has no memory
/// let message = try Gzip.decompress(packed, limit: 4 << 20) // stops as soon as 4 MiB is passed
/// ```
public enum Gzip {
  /// Why ``decompress(_:limit:)`` failed.
  public enum DecompressionError: Error, Sendable, Hashable {
    /// The output passed `limit` bytes; inflating stopped there, after reading `inputConsumed`
    /// bytes of the input (a decompression bomb is never inflated whole).
    case exceedsLimit(limit: Int, inputConsumed: Int)
    /// The input is not gzip, is truncated or fails its checksum; zlib's reason.
    case corrupt(String)
  }

  /// The scratch buffer inflate writes into; the output never holds more than `limit` plus this.
  static let scratchSize = 16 << 10

  /// Decompresses one or more concatenated gzip members (as Go's `gzip.Reader` does).
  ///
  /// The size is checked while inflating: memory stays within `limit` plus a 16 KiB scratch
  /// buffer whatever the input announces.
  ///
  /// - Parameters:
  ///   - bytes: The gzip data; empty input is ``DecompressionError/corrupt(_:)`` (callers skip
  ///     decompressing empty messages, as the Connect specification requires).
  ///   - limit: The largest output accepted, in bytes.
  /// - Throws: ``DecompressionError``.
  public static func decompress(_ bytes: [UInt8], limit: Int) throws(DecompressionError) -> [UInt8] {
    guard bytes.count <= Int(UInt32.max) else { throw .exceedsLimit(limit: limit, inputConsumed: 0) }
    let stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
    stream.initialize(to: z_stream())
    defer { stream.deallocate() }
    guard czlib_inflate_init_gzip(stream) == Z_OK else { throw .corrupt("zlib: inflateInit2 failed") }
    defer { inflateEnd(stream) }
    let result: Result<[UInt8], DecompressionError> = bytes.withUnsafeBufferPointer { input in
      withUnsafeTemporaryAllocation(of: UInt8.self, capacity: scratchSize) { scratch in
        stream.pointee.next_in = UnsafeMutablePointer(mutating: input.baseAddress)
        stream.pointee.avail_in = UInt32(input.count)
        var output: [UInt8] = []
        while true {
          stream.pointee.next_out = scratch.baseAddress
          stream.pointee.avail_out = UInt32(scratch.count)
          let status = inflate(stream, Z_NO_FLUSH)
          let produced = scratch.count - Int(stream.pointee.avail_out)
          guard output.count + produced <= limit else {
            return .failure(.exceedsLimit(limit: limit, inputConsumed: input.count - Int(stream.pointee.avail_in)))
          }
          output.append(contentsOf: scratch[0..<produced])
          switch status {
          case Z_OK:
            continue
          case Z_STREAM_END:
            if stream.pointee.avail_in == 0 { return .success(output) }
            // Another member follows (trailing bytes that are not one fail on its header).
            inflateReset(stream)
          case Z_BUF_ERROR where stream.pointee.avail_in == 0:
            return .failure(.corrupt("unexpected end of gzip data"))
          default:
            let reason = stream.pointee.msg.map { String(cString: $0) } ?? "zlib error \(status)"
            return .failure(.corrupt(reason))
          }
        }
      }
    }
    return try result.get()
  }

  /// Compresses `bytes` as one gzip member at zlib's default level (6, as grpc-go and connect-go).
  ///
  /// - Returns: The gzip data, or `nil` when zlib cannot allocate its state (send uncompressed).
  public static func compress(_ bytes: [UInt8]) -> [UInt8]? {
    guard bytes.count <= Int(UInt32.max) else { return nil }
    let stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
    stream.initialize(to: z_stream())
    defer { stream.deallocate() }
    guard czlib_deflate_init_gzip(stream, Z_DEFAULT_COMPRESSION) == Z_OK else { return nil }
    defer { deflateEnd(stream) }
    // deflateBound is enough for a single deflate(Z_FINISH) with the gzip wrapper.
    let bound = Int(deflateBound(stream, UInt(bytes.count)))
    var finished = false
    let output = bytes.withUnsafeBufferPointer { input in
      [UInt8](unsafeUninitializedCapacity: bound) { buffer, count in
        stream.pointee.next_in = UnsafeMutablePointer(mutating: input.baseAddress)
        stream.pointee.avail_in = UInt32(input.count)
        stream.pointee.next_out = buffer.baseAddress
        stream.pointee.avail_out = UInt32(bound)
        finished = deflate(stream, Z_FINISH) == Z_STREAM_END
        count = finished ? bound - Int(stream.pointee.avail_out) : 0
      }
    }
    return finished ? output : nil
  }
}
