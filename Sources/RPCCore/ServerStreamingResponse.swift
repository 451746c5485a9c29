public import SubstatusWire

extension RPCClient {
  /// Calls a server-streaming method.
  ///
  /// ```swift
  /// let events = try await client.serverStreaming(
  ///   method: "/substatus.v1.EventService/WatchEvents", request: request, response: Event.self)
  /// for try await event in events { print(event) }
  /// ```
  ///
  /// - Parameters:
  ///   - method: The full method path.
  ///   - request: The request message.
  ///   - response: The response message type.
  ///   - metadata: Request metadata.
  ///   - options: Timeout (for the whole stream) and other options.
  /// - Returns: The decoded messages, once the response headers have arrived.
  /// - Throws: ``RPCError`` when the call fails before the response headers (see
  ///   ``ClientTransport/serverStreaming(method:request:metadata:options:)``).
  public func serverStreaming<Request: ProtobufMessage, Response: ProtobufMessage>(
    method: String, request: Request, response: Response.Type, metadata: Metadata = [:],
    options: CallOptions = CallOptions()
  ) async throws(RPCError) -> ServerStreamingResponse<Response> {
    let stream = try await transport.serverStreaming(
      method: method, request: request.serializedBytes(), metadata: metadata, options: options)
    return ServerStreamingResponse(stream)
  }
}

/// The decoded response messages of a server-streaming call.
///
/// Iteration ends at the server's `OK` status and throws ``RPCError`` for any other; a message
/// that does not decode ends the stream with `INTERNAL` and cancels the RPC. Cancelling the
/// iterating task, or releasing the response before its end, cancels the RPC.
public struct ServerStreamingResponse<Response: ProtobufMessage>: AsyncSequence, Sendable {
  /// The element type: one decoded message.
  public typealias Element = Response
  /// The error type: the call's non-`OK` status.
  public typealias Failure = RPCError

  /// The serialized messages underneath.
  public let messages: ClientResponseStream

  /// Decodes the messages of `messages`.
  public init(_ messages: ClientResponseStream) { self.messages = messages }

  /// The response headers' metadata.
  public var initialMetadata: Metadata { messages.initialMetadata }

  /// The trailers' metadata once the stream has ended; empty before.
  public var trailingMetadata: Metadata { messages.trailingMetadata }

  /// Iterates the decoded messages.
  public struct AsyncIterator: AsyncIteratorProtocol {
    let messages: ClientResponseStream

    /// The next message, `nil` at the end.
    public mutating func next() async throws(RPCError) -> Response? { try await Self.decodeNext(messages) }

    /// The next message, `nil` at the end.
    public mutating func next(isolation actor: isolated (any Actor)?) async throws(RPCError) -> Response? {
      try await Self.decodeNext(messages)
    }

    private static func decodeNext(_ messages: ClientResponseStream) async throws(RPCError) -> Response? {
      guard let bytes = try await messages.next() else { return nil }
      do throws(WireError) {
        return try Response(serializedBytes: bytes)
      } catch {
        let failure = RPCError(
          code: .internal, message: "failed to decode \(Response.protoMessageName): \(error.message)",
          cause: error)
        messages.terminate(failure)
        throw failure
      }
    }
  }

  /// Returns an iterator.
  public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(messages: messages) }
}
