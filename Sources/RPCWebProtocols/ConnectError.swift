public import RPCCore
public import SubstatusWire

/// The Connect protocol's error model: code names, the HTTP status of each code, the JSON error
/// body and the end-stream message (connectrpc.com/docs/protocol, "Error Codes" and "Error and
/// EndStreamResponse").
public enum ConnectError {
  /// The Connect name of a code: gRPC's name in lower case, `canceled` spelled as Connect does.
  public static func name(of code: RPCError.Code) -> String {
    code == .cancelled ? "canceled" : code.description.lowercased()
  }

  /// The HTTP status a Connect unary error carries, from the specification's table.
  public static func httpStatus(of code: RPCError.Code) -> Int {
    switch code {
    case .ok: 200
    case .cancelled: 499
    case .invalidArgument, .failedPrecondition, .outOfRange: 400
    case .deadlineExceeded: 504
    case .notFound: 404
    case .alreadyExists, .aborted: 409
    case .permissionDenied: 403
    case .resourceExhausted: 429
    case .unimplemented: 501
    case .unavailable: 503
    case .unauthenticated: 401
    default: 500  // unknown, internal, data_loss
    }
  }

  /// The reason phrase of the HTTP statuses Connect and the listeners use (HTTP/1.1 needs one).
  public static func reasonPhrase(of status: Int) -> String {
    switch status {
    case 200: "OK"
    case 204: "No Content"
    case 400: "Bad Request"
    case 401: "Unauthorized"
    case 403: "Forbidden"
    case 404: "Not Found"
    case 405: "Method Not Allowed"
    case 409: "Conflict"
    case 415: "Unsupported Media Type"
    case 429: "Too Many Requests"
    case 499: "Client Closed Request"
    case 501: "Not Implemented"
    case 503: "Service Unavailable"
    case 504: "Gateway Timeout"
    default: "Internal Server Error"
    }
  }

  /// The JSON `Error` object for a status:
  /// `{"code":"invalid_argument","message":…,"details":[{"type":…,"value":…,"debug":{…}}]}`.
  ///
  /// The details are those of the `google.rpc.Status` in the trailers' `grpc-status-details-bin`
  /// (the same the gRPC trailers carry): `type` is the detail's full message name, `value` its
  /// bytes in base64 without padding, and `debug` its proto3 JSON when the type is known.
  ///
  /// - Parameters:
  ///   - code: The status code (not `OK`).
  ///   - message: The status message; omitted when empty.
  ///   - trailers: The trailing metadata, read for `grpc-status-details-bin`.
  public static func errorJSON(code: RPCError.Code, message: String, trailers: Metadata) -> JSONValue {
    var object = JSONObject()
    object.append("code", .string(name(of: code)))
    if !message.isEmpty { object.append("message", .string(message)) }
    let details = details(from: trailers)
    if !details.isEmpty { object.append("details", .array(details)) }
    return .object(object)
  }

  /// The details of `grpc-status-details-bin` as Connect's JSON detail objects; none when the
  /// field is absent or does not decode.
  static func details(from trailers: Metadata) -> [JSONValue] {
    guard let bytes = trailers.firstBinary(forKey: statusDetailsKey),
      let status = try? Google_Rpc_Status(serializedBytes: bytes)
    else { return [] }
    return status.details.map { any in
      var detail = JSONObject()
      detail.append("type", .string(any.packedTypeName))
      detail.append("value", .string(HeaderCoding.base64Encode(any.value)))
      if let type = ProtoFiles.messageTypes[any.packedTypeName],
        let message = try? type.init(serializedBytes: any.value)
      {
        detail.append("debug", message.jsonValue())
      }
      return .object(detail)
    }
  }

  /// The JSON of Connect's end-stream message: `{"error":{…},"metadata":{"key":["value"]}}`,
  /// `error` only for a failure, `metadata` only when there is trailing metadata (binary values
  /// base64 without padding); a plain success is `{}`.
  public static func endStreamJSON(code: RPCError.Code, message: String, trailers: Metadata) -> JSONValue {
    var object = JSONObject()
    if code != .ok { object.append("error", errorJSON(code: code, message: message, trailers: trailers)) }
    var metadata = JSONObject()
    for element in trailers where !isProtocolKey(element.key) {
      let value = JSONValue.string(HeaderCoding.headerValue(element.value))
      if case .array(let values)? = metadata[element.key] {
        metadata[element.key] = .array(values + [value])
      } else {
        metadata.append(element.key, .array([value]))
      }
    }
    if !metadata.members.isEmpty { object.append("metadata", .object(metadata)) }
    return .object(object)
  }

  /// The metadata key carrying a serialized `google.rpc.Status` with details.
  static let statusDetailsKey = "grpc-status-details-bin"

  /// Whether a metadata key is the protocols' own, not sent as Connect metadata (the details are
  /// in the error's JSON instead).
  static func isProtocolKey(_ key: String) -> Bool {
    key == statusDetailsKey || key.hasPrefix("connect-") || HeaderCoding.isReserved(key)
  }
}
