import RPCCore
import RPCWebProtocols
import Testing

@Suite struct RequestDeframerTests {
  static func format(_ contentType: String) -> CallFormat {
    try! CallFormat.classify(method: "POST", contentType: contentType).get()
  }

  /// Feeds `body` in pieces of `chunk` bytes, collecting messages as they come.
  static func read(_ body: [UInt8], format: CallFormat, max: Int = 100, chunk: Int) throws(RPCError) -> [[UInt8]] {
    var deframer = RequestDeframer(format: format, maxMessageSize: max)
    var messages: [[UInt8]] = []
    var offset = 0
    while offset < body.count {
      try deframer.append(body[offset..<min(offset + chunk, body.count)])
      while let message = try deframer.next() { messages.append(message) }
      offset += chunk
    }
    try deframer.finish()
    while let message = try deframer.next() { messages.append(message) }
    #expect(deframer.bufferedByteCount == 0)
    return messages
  }

  @Test(arguments: [1, 2, 3, 7, 1000])
  func connectUnaryBodyIsOneMessage(chunk: Int) throws {
    let body = Array(#"{"appId":"x"}"#.utf8)
    #expect(try Self.read(body, format: Self.format("application/json"), chunk: chunk) == [body])
    #expect(try Self.read([], format: Self.format("application/proto"), chunk: chunk) == [[]])
  }

  @Test func connectUnaryBodyOverTheLimitFailsAsItArrives() {
    var deframer = RequestDeframer(format: Self.format("application/json"), maxMessageSize: 4)
    #expect(throws: Never.self) { try deframer.append([1, 2, 3, 4]) }
    #expect(throws: RPCError.self) { try deframer.append([5]) }
    do {
      try deframer.append([5])
    } catch {
      #expect(error.code == .resourceExhausted)
      #expect(error.message == "message size 6 is larger than configured max 4")
    }
  }

  @Test(arguments: ["application/connect+proto", "application/grpc-web", "application/grpc-web+json"], [1, 4, 5, 6, 64])
  func envelopesInPiecesOfAnySize(_ contentType: String, chunk: Int) throws {
    let body = envelope(0, [1, 2, 3]) + envelope(0, []) + envelope(0, Array(repeating: 9, count: 40))
    #expect(
      try Self.read(body, format: Self.format(contentType), chunk: chunk)
        == [[1, 2, 3], [], Array(repeating: 9, count: 40)])
  }

  @Test(arguments: [7, 4099, 10_000])
  func longStreamsReadEveryMessageAcrossBufferCompaction(chunk: Int) throws {
    let messages = (0..<3000).map { index in (0..<(index % 13)).map { UInt8(truncatingIfNeeded: index + $0) } }
    let body = messages.flatMap { envelope(0, $0) }
    #expect(try Self.read(body, format: Self.format("application/connect+proto"), chunk: chunk) == messages)
  }

  struct FlagCase: Sendable, CustomStringConvertible {
    var contentType: String
    var flags: UInt8
    var message: String
    var description: String { "\(contentType) flags \(flags)" }
  }

  @Test(arguments: [
    FlagCase(contentType: "application/connect+proto", flags: 1, message: "protocol error: sent compressed message without compression support"),
    FlagCase(contentType: "application/connect+json", flags: 2, message: "protocol error: invalid envelope flags 2 in a request"),
    FlagCase(contentType: "application/connect+proto", flags: 4, message: "protocol error: invalid envelope flags 4 in a request"),
    FlagCase(contentType: "application/grpc-web", flags: 1, message: "grpc: compressed flag set with identity or empty encoding"),
    FlagCase(contentType: "application/grpc-web", flags: 0x80, message: "protocol error: invalid envelope flags 128 in a request"),
    FlagCase(contentType: "application/grpc-web+proto", flags: 0x81, message: "protocol error: invalid envelope flags 129 in a request"),
  ])
  func requestFlagsOtherThanZeroAreRefused(_ row: FlagCase) {
    do {
      _ = try Self.read(envelope(row.flags, [1]), format: Self.format(row.contentType), chunk: 64)
      Issue.record("accepted")
    } catch {
      #expect(error.code == .internal)
      #expect(error.message == row.message)
    }
  }

  @Test(arguments: ["application/connect+proto", "application/grpc-web", "application/grpc-web-text"])
  func envelopeOverTheLimitIsResourceExhausted(_ contentType: String) {
    var deframer = RequestDeframer(format: Self.format(contentType), maxMessageSize: 10)
    var header: [UInt8] = [0, 0, 0, 0, 11]
    if contentType.hasSuffix("text") { header = Array("AAAAAAs=".utf8) }
    do {
      try deframer.append(header)
      _ = try deframer.next()
      Issue.record("accepted")
    } catch {
      #expect(error.code == .resourceExhausted)
      #expect(error.message == "message size 11 is larger than configured max 10")
    }
  }

  @Test(arguments: ["application/connect+proto", "application/grpc-web"], [1, 3, 5, 7])
  func bodyEndingInsideAnEnvelopeIsInternal(_ contentType: String, cut: Int) {
    let body = Array(envelope(0, [1, 2, 3]).prefix(cut))
    do {
      _ = try Self.read(body, format: Self.format(contentType), chunk: 100)
      Issue.record("accepted")
    } catch {
      #expect(error.code == .internal)
      #expect(error.message.contains("ends inside a message envelope"))
    }
  }

  @Test(arguments: [1, 2, 3, 4, 5, 9, 100])
  func grpcWebTextDecodesBase64AsItArrivesWithPaddingPerWrite(chunk: Int) throws {
    // Two writes encoded on their own, each padded, as gRPC-Web text clients send them.
    let first = envelope(0, [1, 2, 3])
    let second = envelope(0, [5, 6])
    let body = Array((base64(first) + base64(second)).utf8)
    #expect(body.contains(UInt8(ascii: "=")))
    #expect(try Self.read(body, format: Self.format("application/grpc-web-text"), chunk: chunk) == [[1, 2, 3], [5, 6]])
  }

  @Test(arguments: ["AA*A", "A===", "AB=C", "AAAAA"])
  func malformedBase64IsInternal(_ text: String) {
    do {
      _ = try Self.read(Array(text.utf8), format: Self.format("application/grpc-web-text"), chunk: 100)
      Issue.record("accepted")
    } catch {
      #expect(error.code == .internal)
      #expect(error.message.hasPrefix("grpc-web-text:"))
    }
  }

  private func base64(_ bytes: [UInt8]) -> String {
    var text = HeaderCoding.base64Encode(bytes)
    while text.utf8.count % 4 != 0 { text += "=" }
    return text
  }
}
