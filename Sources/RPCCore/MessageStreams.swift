import Synchronization
public import SubstatusWire

/// The typed response side of a streaming RPC on the server: each message is encoded in the call's
/// codec (``ServerContext/codec``) and sent at once.
///
/// The first write sends the response headers with the context's initial metadata; a handler that
/// writes nothing ends the call with a Trailers-Only response.
///
/// ```swift
/// func watch(
///   _ request: Grpc_Health_V1_HealthCheckRequest,
///   _ responses: RPCMessageWriter<Grpc_Health_V1_HealthCheckResponse>, _ context: ServerContext
/// ) async throws {
///   var response = Grpc_Health_V1_HealthCheckResponse()
///   response.status = .serving
///   responses.write(response)
/// }
/// ```
public struct RPCMessageWriter<Message: ProtobufJSONMessage>: Sendable {
  private let writer: any RPCResponseWriter
  private let context: ServerContext
  private let headers = HeadersSent()

  private final class HeadersSent: Sendable {
    let sent = Atomic<Bool>(false)
  }

  /// Creates a writer over a transport's response writer (generated code and the router call this).
  ///
  /// - Parameters:
  ///   - writer: Where the response parts go.
  ///   - context: The call's context: its codec and initial metadata.
  public init(writer: any RPCResponseWriter, context: ServerContext) {
    self.writer = writer
    self.context = context
  }

  /// Sends one message; after the call is over (cancelled, timed out) it is dropped.
  ///
  /// - Parameter message: The message.
  public func write(_ message: Message) {
    let bytes = MessageCoding.encode(message, codec: context.codec)
    let first = !headers.sent.exchange(true, ordering: .acquiringAndReleasing)
    writer.write(first ? [.metadata(context.responseInitial), .message(bytes)] : [.message(bytes)])
  }

  /// Sends the response headers now, with the context's initial metadata, unless a message has
  /// sent them: a stream that may wait long for its first message (a watch) tells the client at
  /// once that the call is accepted.
  public func sendHeaders() {
    guard !headers.sent.exchange(true, ordering: .acquiringAndReleasing) else { return }
    writer.write([.metadata(context.responseInitial)])
  }

  /// Sends one message, then waits while the transport holds more than its bound of this call's
  /// unsent response (``RPCResponseWriter/waitForRoom()``): a handler that streams without end
  /// (a watch) writes through this, so a client that reads slowly holds it back instead of
  /// making the server buffer. Returns at once after the call is over.
  ///
  /// - Parameter message: The message.
  public func send(_ message: Message) async {
    write(message)
    await writer.waitForRoom()
  }
}

/// The typed request side of a client- or bidirectional-streaming RPC on the server: the request
/// messages decoded in the call's codec (``ServerContext/codec``), as they arrive.
///
/// A message that does not decode ends the iteration with the ``RPCError`` of
/// ``MessageCoding/decode(_:from:codec:)``.
public struct RPCMessageSequence<Message: ProtobufJSONMessage>: AsyncSequence, Sendable {
  /// The element type: one request message.
  public typealias Element = Message
  /// The error type: an ``RPCError``, or `CancellationError` when the waiting task is cancelled.
  public typealias Failure = any Error

  private let requests: RPCRequestStream
  private let codec: MessageCodec

  /// Creates a sequence over a transport's request stream (generated code and the router call this).
  ///
  /// - Parameters:
  ///   - requests: The serialized request messages.
  ///   - codec: How they are encoded.
  public init(requests: RPCRequestStream, codec: MessageCodec) {
    self.requests = requests
    self.codec = codec
  }

  /// Iterates the messages.
  public struct AsyncIterator: AsyncIteratorProtocol {
    let requests: RPCRequestStream
    let codec: MessageCodec

    /// The next message, `nil` once the client has finished sending.
    public mutating func next() async throws -> Message? {
      guard let bytes = try await requests.next() else { return nil }
      return try MessageCoding.decode(Message.self, from: bytes, codec: codec)
    }
  }

  /// Returns an iterator.
  public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(requests: requests, codec: codec) }
}
