public import SubstatusWire

/// The protocol a call arrived in. The handlers are the same for all three; transports frame
/// requests and responses as the protocol says, and interceptors may log or count by it.
public enum RPCProtocol: String, Sendable, Hashable, CaseIterable {
  /// gRPC over HTTP/2 (`application/grpc`, `application/grpc+proto`).
  case grpc
  /// gRPC-Web (`application/grpc-web`, `+proto`, `-text`): trailers in the body.
  case grpcWeb = "grpc-web"
  /// The Connect protocol (connectrpc.com): unary `application/json` and `application/proto`, and
  /// enveloped streams `application/connect+json` and `application/connect+proto`.
  case connect
}

/// How the messages of a call are encoded: protobuf binary, or proto3 JSON (Connect's
/// `application/json` and `application/connect+json`).
public enum MessageCodec: String, Sendable, Hashable {
  /// The protobuf binary wire format.
  case protobuf = "proto"
  /// The canonical proto3 JSON mapping, UTF-8.
  case json
}

/// Reading and writing typed messages in a call's codec; typed registrations and generated
/// service code use these, so a handler never sees which codec the caller chose.
public enum MessageCoding {
  /// Decodes a request message.
  ///
  /// A binary message that does not decode is `INTERNAL`, as in grpc-go, except a string field that
  /// is not whole (a NUL byte, or not UTF-8): `INVALID_ARGUMENT` naming the field. JSON that does not
  /// fit the message is `INVALID_ARGUMENT` naming the field, as connect-go answers.
  ///
  /// - Parameters:
  ///   - type: The message type.
  ///   - bytes: The serialized message.
  ///   - codec: The call's codec.
  /// - Throws: ``RPCError`` as above.
  public static func decode<Message: ProtobufJSONMessage>(
    _ type: Message.Type, from bytes: [UInt8], codec: MessageCodec
  ) throws(RPCError) -> Message {
    do throws(WireError) {
      switch codec {
      case .protobuf:
        return try Message(serializedBytes: bytes)
      case .json:
        guard let text = String(validating: bytes, as: UTF8.self) else {
          throw WireError(code: .invalidJSON, message: "the body is not UTF-8")
        }
        return try Message(jsonString: text)
      }
    } catch {
      if let violation = error.fieldViolation {
        var rejected = RPCError.invalidArgument(field: violation.field, violation.description)
        rejected.cause = error
        throw rejected
      }
      if error.code == .invalidJSON {
        throw RPCError(
          code: .invalidArgument, message: "failed to decode \(Message.protoMessageName) from JSON: \(error.message)",
          cause: error)
      }
      throw RPCError(
        code: .internal, message: "failed to decode \(Message.protoMessageName): \(error.message)", cause: error)
    }
  }

  /// Encodes a response message in the call's codec.
  public static func encode<Message: ProtobufJSONMessage>(_ message: Message, codec: MessageCodec) -> [UInt8] {
    switch codec {
    case .protobuf: message.serializedBytes()
    case .json: Array(message.jsonString().utf8)
    }
  }
}
