import RPCCore
import RPCWebProtocols
import Testing

/// gzip in the framings: requests inflated by `RequestDeframer`, responses compressed by
/// `ResponseEncoder`, as negotiated by `RequestHead`.
@Suite struct MessageCompressionTests {
  static func format(_ contentType: String) -> CallFormat {
    try! CallFormat.classify(method: "POST", contentType: contentType).get()
  }

  /// The envelopes of a body: (flags, payload).
  static func envelopes(_ body: [UInt8]) -> [(flags: UInt8, payload: [UInt8])] {
    var out: [(UInt8, [UInt8])] = []
    var offset = 0
    while body.count - offset >= 5 {
      let n = Int(body[offset + 1]) << 24 | Int(body[offset + 2]) << 16 | Int(body[offset + 3]) << 8 | Int(body[offset + 4])
      out.append((body[offset], Array(body[(offset + 5)..<(offset + 5 + n)])))
      offset += 5 + n
    }
    return out
  }

  static func gzip(_ bytes: [UInt8]) -> [UInt8] { Gzip.compress(bytes)! }

  /// The request body of `messages` (each gzipped when `compressed`) in a framing.
  static func requestBody(_ format: CallFormat, _ messages: [(compressed: Bool, bytes: [UInt8])]) -> [UInt8] {
    if format.framing == .connectUnary {
      return messages[0].compressed ? gzip(messages[0].bytes) : messages[0].bytes
    }
    let binary = messages.flatMap { $0.compressed ? envelope(1, gzip($0.bytes)) : envelope(0, $0.bytes) }
    guard format.framing == .grpcWebText else { return binary }
    return Array(HeaderCodingBase64.padded(binary).utf8)
  }

  static func read(
    _ body: [UInt8], format: CallFormat, compression: CompressionAlgorithm, max: Int, chunk: Int
  ) throws(RPCError) -> [[UInt8]] {
    var deframer = RequestDeframer(format: format, maxMessageSize: max, compression: compression)
    var messages: [[UInt8]] = []
    var offset = 0
    while offset < body.count {
      try deframer.append(body[offset..<min(offset + chunk, body.count)])
      while let message = try deframer.next() { messages.append(message) }
      offset += chunk
    }
    try deframer.finish()
    while let message = try deframer.next() { messages.append(message) }
    return messages
  }

  static let framings = [
    "application/json", "application/connect+proto", "application/grpc-web", "application/grpc-web-text",
    "application/grpc",
  ]

  // MARK: Requests

  @Test(arguments: framings, [3, 512, 1 << 20])
  func requestsInflateInEveryFraming(_ contentType: String, chunk: Int) throws {
    let format = Self.format(contentType)
    let big = sampleBytes(5000)
    let small = Array("{}".utf8)
    let messages: [(Bool, [UInt8])] =
      format.framing == .connectUnary ? [(true, big)] : [(true, big), (false, small), (true, []), (true, small)]
    let body = Self.requestBody(format, messages)
    #expect(try Self.read(body, format: format, compression: .gzip, max: 5000, chunk: chunk) == messages.map(\.1))
  }

  @Test(arguments: ["application/json", "application/proto"])
  func anEmptyConnectUnaryBodyIsNotInflated(_ contentType: String) throws {
    #expect(try Self.read([], format: Self.format(contentType), compression: .gzip, max: 10, chunk: 1) == [[]])
  }

  @Test(arguments: framings)
  func aBombIsResourceExhaustedWithoutInflatingIt(_ contentType: String) throws {
    let format = Self.format(contentType)
    let bomb = try Fixture.bytes("bomb-4MiB-zeros.gz")
    var body = format.framing == .connectUnary ? bomb : envelope(1, bomb)
    if format.framing == .grpcWebText { body = Array(HeaderCodingBase64.padded(body).utf8) }
    do {
      let messages = try Self.read(body, format: format, compression: .gzip, max: 64 << 10, chunk: 1 << 20)
      Issue.record("read \(messages.map(\.count))")
    } catch {
      #expect(error.code == .resourceExhausted)
      #expect(error.message == "message after decompression is larger than configured max 65536")
    }
  }

  struct CorruptCase: Sendable, CustomStringConvertible {
    var contentType: String
    var code: RPCError.Code
    var prefix: String
    var description: String { contentType }
  }

  @Test(arguments: [
    CorruptCase(contentType: "application/proto", code: .invalidArgument, prefix: "decompress gzip message: "),
    CorruptCase(contentType: "application/connect+json", code: .invalidArgument, prefix: "decompress gzip message: "),
    CorruptCase(
      contentType: "application/grpc-web+proto", code: .internal,
      prefix: "grpc: failed to decompress the received message: "),
    CorruptCase(
      contentType: "application/grpc", code: .internal, prefix: "grpc: failed to decompress the received message: "),
  ])
  func corruptGzipIsInvalidArgumentForConnectAndInternalForGRPC(_ row: CorruptCase) throws {
    let format = Self.format(row.contentType)
    let broken = Array(Self.gzip(sampleBytes(3000)).dropLast(6))
    let body = format.framing == .connectUnary ? broken : envelope(1, broken)
    do {
      let messages = try Self.read(body, format: format, compression: .gzip, max: 1 << 20, chunk: 100)
      Issue.record("read \(messages.map(\.count))")
    } catch {
      #expect(error.code == row.code)
      #expect(error.message.hasPrefix(row.prefix), "\(error.message)")
    }
  }

  @Test(arguments: ["application/connect+proto", "application/grpc-web"])
  func theCompressedFlagWithoutGzipStaysAnError(_ contentType: String) {
    #expect(throws: RPCError.self) {
      try Self.read(
        envelope(1, Self.gzip([1, 2, 3])), format: Self.format(contentType), compression: .identity, max: 100,
        chunk: 64)
    }
  }

  // MARK: Responses

  struct ThresholdCase: Sendable, CustomStringConvertible {
    var contentType: String
    var algorithm: CompressionAlgorithm
    var size: Int
    var compressed: Bool
    var description: String { "\(contentType) \(algorithm) \(size)" }
  }

  static let thresholdCases: [ThresholdCase] = framings.filter { $0 != "application/grpc" }.flatMap { type in
    [
      ThresholdCase(contentType: type, algorithm: .gzip, size: 1023, compressed: false),
      ThresholdCase(contentType: type, algorithm: .gzip, size: 1024, compressed: true),
      ThresholdCase(contentType: type, algorithm: .gzip, size: 60_000, compressed: true),
      ThresholdCase(contentType: type, algorithm: .identity, size: 60_000, compressed: false),
    ]
  }

  /// Encodes one message and an OK status; returns the head fields and the message as sent (body
  /// or envelope payload, base64 undone) with its flags.
  static func respond(_ contentType: String, compression: ResponseCompression?, message: [UInt8]) -> (
    fields: [HTTPField], flags: UInt8?, payload: [UInt8], trailer: (flags: UInt8, payload: [UInt8])?
  ) {
    let format = Self.format(contentType)
    var encoder = ResponseEncoder(format: format, maxSendMessageSize: 1 << 20, compression: compression)
    let first = encoder.encode([.metadata(["x-initial": "1"]), .message(message)])
    let last = encoder.encode([.status(.ok, message: "", trailers: [:])])
    let fields = (first.head ?? last.head)?.fields ?? []
    var body = first.body + last.body
    if format.framing == .connectUnary { return (fields, nil, body, nil) }
    if format.framing == .grpcWebText {
      var decoded: [UInt8] = []
      for text in [first.body, last.body] { decoded += HeaderCodingBase64.decode(text) }
      body = decoded
    }
    let envelopes = Self.envelopes(body)
    return (fields, envelopes.first?.flags, envelopes.first?.payload ?? [], envelopes.last.map { ($0.flags, $0.payload) })
  }

  @Test(arguments: thresholdCases)
  func messagesAtOrAboveTheThresholdAreGzipped(_ row: ThresholdCase) throws {
    let format = Self.format(row.contentType)
    let message = sampleBytes(row.size)
    let out = Self.respond(row.contentType, compression: ResponseCompression(algorithm: row.algorithm), message: message)
    let acceptField =
      switch format.framing {
      case .connectUnary: "accept-encoding"
      case .connectStreaming: "connect-accept-encoding"
      default: "grpc-accept-encoding"
      }
    let encodingField =
      switch format.framing {
      case .connectUnary: "content-encoding"
      case .connectStreaming: "connect-content-encoding"
      default: "grpc-encoding"
      }
    #expect(out.fields.contains(HTTPField(acceptField, "gzip,identity")))
    #expect(out.fields.contains(HTTPField("x-initial", "1")))
    let names = out.fields.map(\.name)
    #expect(names.filter { $0 == acceptField }.count == 1)
    if format.framing == .connectUnary {
      // The unary head is sent with the body: content-encoding says what this body is.
      #expect(names.contains(encodingField) == row.compressed)
    } else {
      // A streaming head is sent before the messages: it names gzip whenever gzip is negotiated.
      #expect(names.contains(encodingField) == (row.algorithm == .gzip))
      #expect(out.flags == (row.compressed ? 1 : 0))
      // The end of the stream is never compressed.
      let trailer = try #require(out.trailer)
      #expect(trailer.flags == (format.framing == .connectStreaming ? 0x02 : 0x80))
      #expect(trailer.payload.first == (format.framing == .connectStreaming ? UInt8(ascii: "{") : UInt8(ascii: "g")))
    }
    if row.compressed {
      #expect(out.payload.count < message.count / 3)
      #expect(try Gzip.decompress(out.payload, limit: message.count) == message)
    } else {
      #expect(out.payload == message)
    }
  }

  @Test(arguments: framings.filter { $0 != "application/grpc" })
  func withoutTheOptionNothingChanges(_ contentType: String) {
    let out = Self.respond(contentType, compression: nil, message: sampleBytes(5000))
    #expect(out.payload == sampleBytes(5000))
    #expect(out.fields.map(\.name) == ["content-type", "x-initial"])
  }

  @Test func aSmallerThresholdCompressesSmallerMessages() throws {
    let message = Array(String(repeating: "ab", count: 100).utf8)
    let out = Self.respond(
      "application/json", compression: ResponseCompression(algorithm: .gzip, threshold: 100), message: message)
    #expect(out.fields.contains(HTTPField("content-encoding", "gzip")))
    #expect(try Gzip.decompress(out.payload, limit: 200) == message)
  }

  @Test func connectUnaryErrorsStayUncompressed() {
    var encoder = ResponseEncoder(
      format: Self.format("application/json"), maxSendMessageSize: 1 << 20,
      compression: ResponseCompression(algorithm: .gzip, threshold: 0))
    // As long as a status message may be (StatusBounds), far over the threshold.
    let text = String(repeating: "x", count: StatusBounds.maxMessageBytes)
    let out = encoder.encode([.status(.invalidArgument, message: text, trailers: [:])])
    #expect(out.head?.status == 400)
    #expect(
      out.head?.fields == [HTTPField("content-type", "application/json"), HTTPField("accept-encoding", "gzip,identity")])
    #expect(String(decoding: out.body, as: UTF8.self) == #"{"code":"invalid_argument","message":"\#(text)"}"#)
  }

  @Test func aTrailersOnlyAnswerNamesNoMessageEncoding() {
    var encoder = ResponseEncoder(
      format: Self.format("application/grpc-web"), maxSendMessageSize: 10,
      compression: ResponseCompression(algorithm: .gzip))
    let out = encoder.encode([.status(.notFound, message: "no", trailers: [:])])
    #expect(out.head?.fields.map(\.name) == ["content-type", "grpc-status", "grpc-message", "grpc-accept-encoding"])
    #expect(out.body.isEmpty)
  }

  @Test func theSendLimitIsOnTheUncompressedSize() {
    var encoder = ResponseEncoder(
      format: Self.format("application/proto"), maxSendMessageSize: 4000,
      compression: ResponseCompression(algorithm: .gzip))
    let out = encoder.encode([.message(sampleBytes(5000)), .status(.ok, message: "", trailers: [:])])
    #expect(out.exceededSendLimit)
    #expect(out.head?.status == 429)
  }

  @Test func aRefusalAdvertisesTheAcceptedEncodingsOnce() throws {
    let format = Self.format("application/connect+json")
    guard
      case .failure(let refusal) = RequestHead.parse(
        [HTTPField("connect-content-encoding", "br")], format: format, supportedCompression: CompressionAlgorithm.supported)
    else {
      Issue.record("accepted"); return
    }
    var encoder = ResponseEncoder(
      format: format, maxSendMessageSize: 10, compression: ResponseCompression(algorithm: .identity))
    let out = encoder.encode(refusal.responseParts)
    #expect(out.head?.fields.filter { $0.name == "connect-accept-encoding" } == [HTTPField("connect-accept-encoding", "gzip,identity")])
  }

  /// What the negotiation gives the encoder: gzip requested and accepted round-trips through both.
  @Test(arguments: framings.filter { $0 != "application/grpc" })
  func negotiatedByTheHeadEndToEnd(_ contentType: String) throws {
    let format = Self.format(contentType)
    let fields =
      switch format.framing {
      case .connectUnary: [HTTPField("content-encoding", "gzip"), HTTPField("accept-encoding", "gzip")]
      case .connectStreaming: [HTTPField("connect-content-encoding", "gzip"), HTTPField("connect-accept-encoding", "gzip")]
      default: [HTTPField("grpc-encoding", "gzip"), HTTPField("grpc-accept-encoding", "identity,gzip")]
      }
    let head = try RequestHead.parse(fields, format: format, supportedCompression: CompressionAlgorithm.supported).get()
    let request = sampleBytes(2000)
    let body = Self.requestBody(format, [(true, request)])
    #expect(try Self.read(body, format: format, compression: head.compression, max: 4096, chunk: 700) == [request])
    let out = Self.respond(contentType, compression: ResponseCompression(algorithm: head.responseCompression), message: request)
    #expect(try Gzip.decompress(out.payload, limit: 4096) == request)
  }
}

/// Standard base64 for the gRPC-Web text rows, written here so the test does not use the code
/// under test.
enum HeaderCodingBase64 {
  static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

  static func padded(_ bytes: [UInt8]) -> String {
    var out: [UInt8] = []
    var i = 0
    while i < bytes.count {
      let chunk = Array(bytes[i..<min(i + 3, bytes.count)])
      let n = chunk.enumerated().reduce(UInt32(0)) { $0 | UInt32($1.element) << (16 - 8 * $1.offset) }
      for j in 0..<4 {
        out.append(j <= chunk.count ? alphabet[Int(n >> (18 - 6 * j) & 0x3F)] : UInt8(ascii: "="))
      }
      i += 3
    }
    return String(decoding: out, as: UTF8.self)
  }

  static func decode(_ text: [UInt8]) -> [UInt8] {
    var out: [UInt8] = []
    var bits: UInt32 = 0
    var count = 0
    for c in text where c != UInt8(ascii: "=") {
      guard let v = alphabet.firstIndex(of: c) else { continue }
      bits = bits << 6 | UInt32(v)
      count += 6
      if count >= 8 {
        count -= 8
        out.append(UInt8(truncatingIfNeeded: bits >> UInt32(count)))
      }
    }
    return out
  }
}
