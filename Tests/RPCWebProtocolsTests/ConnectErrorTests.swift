import RPCCore
import RPCWebProtocols
import SubstatusWire
import Testing

@Suite struct ConnectErrorTests {
  /// The specification's "Error Codes" table: code, Connect name, HTTP status.
  static let table: [(RPCError.Code, String, Int)] = [
    (.cancelled, "canceled", 499),
    (.unknown, "unknown", 500),
    (.invalidArgument, "invalid_argument", 400),
    (.deadlineExceeded, "deadline_exceeded", 504),
    (.notFound, "not_found", 404),
    (.alreadyExists, "already_exists", 409),
    (.permissionDenied, "permission_denied", 403),
    (.resourceExhausted, "resource_exhausted", 429),
    (.failedPrecondition, "failed_precondition", 400),
    (.aborted, "aborted", 409),
    (.outOfRange, "out_of_range", 400),
    (.unimplemented, "unimplemented", 501),
    (.internal, "internal", 500),
    (.unavailable, "unavailable", 503),
    (.dataLoss, "data_loss", 500),
    (.unauthenticated, "unauthenticated", 401),
  ]

  @Test(arguments: table)
  func codeHasTheSpecificationsNameAndHTTPStatus(_ code: RPCError.Code, _ name: String, _ status: Int) {
    #expect(ConnectError.name(of: code) == name)
    #expect(ConnectError.httpStatus(of: code) == status)
    #expect(ConnectError.errorJSON(code: code, message: "", trailers: [:]).serialized() == #"{"code":"\#(name)"}"#)
  }

  @Test(arguments: table)
  func everyStatusOfTheTableHasItsReasonPhrase(_ code: RPCError.Code, _ name: String, _ status: Int) {
    let phrase = ConnectError.reasonPhrase(of: status)
    #expect((phrase == "Internal Server Error") == (status == 500), "\(status) \(phrase)")
  }

  @Test func errorCarriesTheDetailsOfTheGRPCTrailers() throws {
    let error = RPCError.invalidArgument(field: "queries[0].user_id", "must not be empty")
    let json = ConnectError.errorJSON(code: error.code, message: error.message, trailers: error.metadata)
    // The value is the BadRequest's bytes, base64 without padding.
    let status = try Google_Rpc_Status(serializedBytes: try #require(error.metadata.firstBinary(forKey: "grpc-status-details-bin")))
    let value = HeaderCoding.base64Encode(status.details[0].value)
    #expect(!value.hasSuffix("="))
    #expect(
      json.serialized()
        == #"{"code":"invalid_argument","message":"queries[0].user_id: must not be empty","details":[{"type":"google.rpc.BadRequest","value":"\#(value)","debug":{"fieldViolations":[{"field":"queries[0].user_id","description":"must not be empty"}]}}]}"#
    )
    // The value decodes back to the same BadRequest.
    let decoded = try Google_Rpc_BadRequest(serializedBytes: try #require(HeaderCoding.base64Decode(value)))
    #expect(decoded.fieldViolations.first?.field == "queries[0].user_id")
  }

  @Test func detailOfAnUnknownTypeHasNoDebug() {
    var any = Google_Protobuf_Any()
    any.typeURL = "type.googleapis.com/example.Unknown"
    any.value = [1, 2, 3]
    var status = Google_Rpc_Status()
    status.code = 9
    status.details = [any]
    var trailers = Metadata()
    trailers.addBinary(status.serializedBytes(), forKey: "grpc-status-details-bin")
    #expect(
      ConnectError.errorJSON(code: .failedPrecondition, message: "m", trailers: trailers).serialized()
        == #"{"code":"failed_precondition","message":"m","details":[{"type":"example.Unknown","value":"AQID"}]}"#)
  }

  @Test func undecodableDetailsAreLeftOut() {
    var trailers = Metadata()
    trailers.addBinary([0xFF, 0xFF], forKey: "grpc-status-details-bin")
    #expect(ConnectError.errorJSON(code: .internal, message: "x", trailers: trailers).serialized() == #"{"code":"internal","message":"x"}"#)
  }

  @Test func endStreamMessage() {
    #expect(ConnectError.endStreamJSON(code: .ok, message: "", trailers: [:]).serialized() == "{}")
    var trailers: Metadata = ["cost": "237"]
    trailers.addString("2", forKey: "cost")
    trailers.addBinary([0, 1], forKey: "trace-bin")
    trailers.addBinary([9], forKey: "grpc-status-details-bin")
    #expect(
      ConnectError.endStreamJSON(code: .ok, message: "", trailers: trailers).serialized()
        == #"{"metadata":{"cost":["237","2"],"trace-bin":["AAE"]}}"#)
    #expect(
      ConnectError.endStreamJSON(code: .unavailable, message: "overloaded", trailers: ["cost": "1"]).serialized()
        == #"{"error":{"code":"unavailable","message":"overloaded"},"metadata":{"cost":["1"]}}"#)
  }
}
