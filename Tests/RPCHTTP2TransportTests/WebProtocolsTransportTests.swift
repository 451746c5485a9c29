import Foundation
import SubstatusProcessTestKit
import RPCCore
import RPCHTTP2Transport
import RPCWebProtocols
import SubstatusServiceAPI
import SubstatusWire
import Testing

/// The bench service (Echo, CheckEligibility) with health and reflection, as Connect and gRPC-Web
/// clients meet it over HTTP/2. CheckEligibility answers `INVALID_ARGUMENT` with a BadRequest for
/// an empty `app_id` and sleeps for `app_id` "slow" (deadlines); `/test.Stream/Count` streams as
/// many messages as the request's bytes say; `/test.Stream/Duplex` echoes each message as it comes.
func webRouter() -> RPCRouter {
  var router = RPCRouter()
  router.registerUnary(
    method: "/subs.bench.v1.Bench/Echo", request: Subs_Bench_V1_EchoRequest.self, response: Subs_Bench_V1_EchoReply.self
  ) { request, context in
    context.response.addInitial(context.rpcProtocol.rawValue, forKey: "x-protocol")
    context.response.addTrailing(context.codec.rawValue, forKey: "x-codec")
    if let caller = context.metadata.firstString(forKey: "x-caller") { context.response.addInitial(caller, forKey: "x-caller") }
    var reply = Subs_Bench_V1_EchoReply()
    reply.payload = request.payload
    return reply
  }
  router.registerUnary(
    method: "/subs.bench.v1.Bench/CheckEligibility", request: Subs_Bench_V1_EligibilityRequest.self,
    response: Subs_Bench_V1_EligibilityReply.self
  ) { request, _ in
    if request.appID == "slow" { try await Task.sleep(for: .seconds(20)) }
    guard !request.appID.isEmpty else { throw RPCError.invalidArgument(field: "app_id", "must not be empty") }
    var reply = Subs_Bench_V1_EligibilityReply()
    reply.results = request.productIDs.map { id in
      var item = Subs_Bench_V1_ProductEligibility()
      item.productID = id
      item.introEligible = id.hasSuffix("1")
      return item
    }
    return reply
  }
  router.registerStreaming(method: "/test.Stream/Duplex") { requests, responses, _ in
    for try await message in requests { responses.write([.message(message)]) }
    return []
  }
  router.registerStreaming(method: "/test.Stream/Count") { requests, responses, _ in
    let count = try await requests.single().count
    for index in 0..<count { responses.write([.message([UInt8(index)])]) }
    return []
  }
  HealthService().register(into: &router)
  ReflectionService(files: ProtoFiles.all).register(into: &router)
  return router
}

/// `.venv/bin/buf` (PyPI's `buf-bin`).
let bufCLI = packageRoot.appendingPathComponent(".venv/bin/buf").path

/// Runs `buf curl` against a local cleartext HTTP/2 server.
func bufCurl(_ port: Int, _ path: String, protocol rpcProtocol: String, schema: Bool, _ extra: [String] = []) async throws
  -> ProcessResult
{
  var arguments = ["curl", "--http2-prior-knowledge", "--protocol", rpcProtocol]
  if schema { arguments += ["--schema", packageRoot.appendingPathComponent("Protos").path] }
  return try await runProcess(bufCLI, arguments + extra + ["http://127.0.0.1:\(port)\(path)"], timeout: .seconds(60))
}

/// An HTTP answer as curl saw it.
struct CurlAnswer {
  var status: Int
  var headers: [String: String]
  var body: [UInt8]
  var text: String { String(decoding: body, as: UTF8.self) }
}

/// POSTs `body` with `curl --http2-prior-knowledge`, returning the status, headers and body.
func curlHTTP2(
  _ port: Int, _ path: String, contentType: String?, body: [UInt8], headers: [String] = [], method: String = "POST"
) async throws -> CurlAnswer {
  let directory = FileManager.default.temporaryDirectory.appendingPathComponent("web19-curl-\(UUID().uuidString)")
  try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
  defer { try? FileManager.default.removeItem(at: directory) }
  let bodyFile = directory.appendingPathComponent("request")
  let answerFile = directory.appendingPathComponent("answer")
  let headerFile = directory.appendingPathComponent("headers")
  try Data(body).write(to: bodyFile)
  var arguments = ["-sS", "--http2-prior-knowledge", "-X", method, "-o", answerFile.path, "-D", headerFile.path]
  if method == "POST" { arguments += ["--data-binary", "@" + bodyFile.path] }
  if let contentType { arguments += ["-H", "content-type: \(contentType)"] }
  for header in headers { arguments += ["-H", header] }
  let result = try await runProcess("/usr/bin/curl", arguments + ["http://127.0.0.1:\(port)\(path)"], timeout: .seconds(30))
  #expect(result.status == 0, "curl failed: \(result.stderr)")
  let headerText = (try? String(contentsOf: headerFile, encoding: .utf8)) ?? ""
  var status = 0
  var fields: [String: String] = [:]
  for line in headerText.split(separator: "\r\n") {
    if line.hasPrefix("HTTP/") {
      status = Int(line.split(separator: " ")[1]) ?? 0
    } else if let colon = line.firstIndex(of: ":") {
      let name = line[..<colon].lowercased()
      let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
      fields[name] = fields[name].map { $0 + ", " + value } ?? value
    }
  }
  let answer = (try? Data(contentsOf: answerFile)).map { [UInt8]($0) } ?? []
  return CurlAnswer(status: status, headers: fields, body: answer)
}

/// Splits an enveloped body into (flags, payload) pairs.
func envelopes(_ body: [UInt8]) -> [(UInt8, [UInt8])] {
  var out: [(UInt8, [UInt8])] = []
  var offset = 0
  while body.count - offset >= 5 {
    let length = Int(body[offset + 1]) << 24 | Int(body[offset + 2]) << 16 | Int(body[offset + 3]) << 8 | Int(body[offset + 4])
    guard body.count - offset - 5 >= length else { break }
    out.append((body[offset], Array(body[(offset + 5)..<(offset + 5 + length)])))
    offset += 5 + length
  }
  return out
}

func envelope(_ flags: UInt8, _ payload: [UInt8]) -> [UInt8] {
  let n = payload.count
  return [flags, UInt8(n >> 24 & 0xFF), UInt8(n >> 16 & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n & 0xFF)] + payload
}

func withWebServer(
  configure: @escaping (inout HTTP2ServerTransport.Configuration) -> Void = { _ in }, _ body: (TestServer) async throws -> Void
) async throws {
  try await withTestServer(configure: configure, router: { _ in webRouter() }, body)
}

@Suite(.serialized) struct BufCurlHTTP2Tests {
  @Test(arguments: ["connect", "grpcweb", "grpc"], [false, true])
  func callsCheckEligibility(_ rpcProtocol: String, schema: Bool) async throws {
    try await withWebServer { server in
      let result = try await bufCurl(
        server.port, "/subs.bench.v1.Bench/CheckEligibility", protocol: rpcProtocol, schema: schema,
        ["-d", #"{"appId":"a","userId":"u","productIds":["p1","p2"]}"#])
      #expect(result.status == 0, "\(result.stderr)")
      let json = try JSONValue(parsing: result.stdout)
      let results = try #require(json["results"]?.arrayValue)
      #expect(results.count == 2)
      #expect(results[0]["productId"]?.stringValue == "p1")
      #expect(results[0]["introEligible"]?.boolValue == true)
    }
  }

  @Test(arguments: ["connect", "grpcweb", "grpc"])
  func listsServicesThroughReflectionInTheCallsProtocol(_ rpcProtocol: String) async throws {
    try await withWebServer { server in
      let result = try await bufCurl(server.port, "", protocol: rpcProtocol, schema: false, ["--list-services"])
      #expect(result.status == 0, "\(result.stderr)")
      for service in ["subs.bench.v1.Bench", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"] {
        #expect(result.stdout.contains(service), "\(result.stdout)")
      }
    }
  }

  @Test(arguments: ["connect", "grpcweb", "grpc"])
  func invalidArgumentCarriesTheBadRequestDetails(_ rpcProtocol: String) async throws {
    try await withWebServer { server in
      let result = try await bufCurl(
        server.port, "/subs.bench.v1.Bench/CheckEligibility", protocol: rpcProtocol, schema: true,
        ["-d", #"{"userId":"u"}"#])
      #expect(result.status != 0)
      let json = try JSONValue(parsing: result.stderr)
      #expect(json["code"]?.stringValue == "invalid_argument", "\(result.stderr)")
      #expect(json["message"]?.stringValue == "app_id: must not be empty")
      let detail = try #require(json["details"]?.arrayValue?.first)
      #expect(detail["type"]?.stringValue == "google.rpc.BadRequest")
      #expect(detail["value"]?.stringValue?.isEmpty == false)
      if rpcProtocol == "connect" {
        // Connect's JSON carries the server's debug form; buf prints it as received.
        #expect(detail["debug"]?["fieldViolations"]?.arrayValue?.first?["field"]?.stringValue == "app_id")
      }
    }
  }

  @Test(arguments: ["connect", "grpcweb"])
  func metadataGoesBothWays(_ rpcProtocol: String) async throws {
    try await withWebServer { server in
      let result = try await bufCurl(
        server.port, "/subs.bench.v1.Bench/Echo", protocol: rpcProtocol, schema: true,
        ["-v", "-H", "x-caller: tester", "-d", #"{"payload":"aGk="}"#])
      #expect(result.status == 0, "\(result.stderr)")
      #expect(try JSONValue(parsing: result.stdout)["payload"]?.stringValue == "aGk=")
      let log = result.stderr.lowercased()
      #expect(log.contains("x-caller: tester"))
      #expect(log.contains("x-protocol: \(rpcProtocol == "connect" ? "connect" : "grpc-web")"), "\(result.stderr)")
      // Connect unary trailers are `trailer-` fields; gRPC-Web's are in the body, which -v does not show.
      if rpcProtocol == "connect" { #expect(log.contains("trailer-x-codec: proto"), "\(result.stderr)") }
    }
  }
}

@Suite(.serialized) struct CurlHTTP2Tests {
  static let eligibility = Array(#"{"appId":"a","userId":"u","productIds":["p1"]}"#.utf8)

  @Test func connectJSONOneLiner() async throws {
    try await withWebServer { server in
      let answer = try await curlHTTP2(
        server.port, "/subs.bench.v1.Bench/CheckEligibility", contentType: "application/json", body: Self.eligibility)
      #expect(answer.status == 200)
      #expect(answer.headers["content-type"] == "application/json")
      #expect(answer.text == #"{"results":[{"productId":"p1","introEligible":true}]}"#)
    }
  }

  @Test func connectUnaryMetadataAndTrailers() async throws {
    try await withWebServer { server in
      let answer = try await curlHTTP2(
        server.port, "/subs.bench.v1.Bench/Echo", contentType: "application/json", body: Array(#"{"payload":"AQI="}"#.utf8),
        headers: ["connect-protocol-version: 1", "x-caller: c"])
      #expect(answer.status == 200)
      #expect(answer.headers["x-protocol"] == "connect")
      #expect(answer.headers["x-caller"] == "c")
      #expect(answer.headers["trailer-x-codec"] == "json")
      #expect(answer.text == #"{"payload":"AQI="}"#)
    }
  }

  struct ErrorCase: Sendable, CustomStringConvertible {
    var name: String
    var path: String
    var contentType: String
    var body: String
    var headers: [String] = []
    var status: Int
    var code: String
    var message: String
    var description: String { name }
  }

  static let errors: [ErrorCase] = [
    ErrorCase(
      name: "unknown method", path: "/subs.bench.v1.Bench/Nope", contentType: "application/json", body: "{}", status: 501,
      code: "unimplemented", message: "unknown method Nope for service subs.bench.v1.Bench"),
    ErrorCase(
      name: "bad JSON", path: "/subs.bench.v1.Bench/CheckEligibility", contentType: "application/json",
      body: #"{"appId": 5"#, status: 400, code: "invalid_argument", message: "failed to decode subs.bench.v1.EligibilityRequest from JSON"),
    ErrorCase(
      name: "field of the wrong type", path: "/subs.bench.v1.Bench/CheckEligibility", contentType: "application/json",
      body: #"{"appId": 5}"#, status: 400, code: "invalid_argument", message: "app"),
    ErrorCase(
      name: "oversized body", path: "/subs.bench.v1.Bench/CheckEligibility", contentType: "application/json",
      body: #"{"appId":""# + String(repeating: "x", count: 5000) + #""}"#, status: 429, code: "resource_exhausted",
      message: "larger than configured max 4096"),
    ErrorCase(
      name: "deadline", path: "/subs.bench.v1.Bench/CheckEligibility", contentType: "application/json",
      body: #"{"appId":"slow"}"#, headers: ["connect-timeout-ms: 100"], status: 504, code: "deadline_exceeded",
      message: "deadline exceeded"),
    ErrorCase(
      name: "bad timeout", path: "/subs.bench.v1.Bench/CheckEligibility", contentType: "application/json",
      body: "{}", headers: ["connect-timeout-ms: soon"], status: 400, code: "invalid_argument", message: "parse timeout"),
    ErrorCase(
      name: "protocol version", path: "/subs.bench.v1.Bench/CheckEligibility", contentType: "application/proto",
      body: "", headers: ["connect-protocol-version: 2"], status: 400, code: "invalid_argument",
      message: "connect-protocol-version must be \"1\""),
    ErrorCase(
      name: "compression", path: "/subs.bench.v1.Bench/CheckEligibility", contentType: "application/json",
      body: "{}", headers: ["content-encoding: br"], status: 501, code: "unimplemented",
      message: "supported encodings are gzip, identity"),
    ErrorCase(
      name: "details", path: "/subs.bench.v1.Bench/CheckEligibility", contentType: "application/json",
      body: "{}", status: 400, code: "invalid_argument", message: "app_id: must not be empty"),
  ]

  @Test(arguments: errors)
  func connectErrorsFollowTheSpecification(_ row: ErrorCase) async throws {
    try await withWebServer(configure: { $0.maxReceiveMessageSize = 4096 }) { server in
      let answer = try await curlHTTP2(
        server.port, row.path, contentType: row.contentType, body: Array(row.body.utf8), headers: row.headers)
      #expect(answer.status == row.status, "\(answer.text)")
      #expect(answer.headers["content-type"] == "application/json")
      let json = try JSONValue(parsing: answer.text)
      #expect(json["code"]?.stringValue == row.code, "\(answer.text)")
      #expect(json["message"]?.stringValue?.contains(row.message) == true, "\(answer.text)")
      if row.name == "compression" { #expect(answer.headers["accept-encoding"] == "gzip,identity") }
      if row.name == "details" {
        #expect(json["details"]?.arrayValue?.first?["type"]?.stringValue == "google.rpc.BadRequest")
        #expect(answer.headers["trailer-grpc-status-details-bin"] == nil)
      }
    }
  }

  /// curl sends a gzipped Connect JSON request and accepts gzip: the reply (200 results, over the
  /// 1 KiB threshold) comes back gzipped, with the encodings the server accepts.
  @Test func connectUnaryGzipBothWays() async throws {
    try await withWebServer { server in
      let products = (0..<200).map { "\"com.example.product.\($0)\"" }.joined(separator: ",")
      let json = Array(#"{"appId":"a","userId":"u","productIds":[\#(products)]}"#.utf8)
      let answer = try await curlHTTP2(
        server.port, "/subs.bench.v1.Bench/CheckEligibility", contentType: "application/json",
        body: try #require(Gzip.compress(json)), headers: ["content-encoding: gzip", "accept-encoding: gzip"])
      #expect(answer.status == 200, "\(answer.text)")
      #expect(answer.headers["content-encoding"] == "gzip")
      #expect(answer.headers["accept-encoding"] == "gzip,identity")
      let reply = String(decoding: try Gzip.decompress(answer.body, limit: 1 << 20), as: UTF8.self)
      #expect(reply.hasPrefix(#"{"results":[{"productId":"com.example.product.0""#), "\(reply)")
    }
  }

  @Test func unsupportedContentTypeIs415() async throws {
    try await withWebServer { server in
      let answer = try await curlHTTP2(
        server.port, "/subs.bench.v1.Bench/CheckEligibility", contentType: "text/xml", body: Array("<a/>".utf8))
      #expect(answer.status == 415)
      #expect(answer.text.contains("unsupported content-type \"text/xml\""))
      #expect(answer.headers["accept-post"]?.contains("application/json") == true)
      // The server keeps serving.
      let ok = try await curlHTTP2(
        server.port, "/subs.bench.v1.Bench/CheckEligibility", contentType: "application/json", body: Self.eligibility)
      #expect(ok.status == 200)
    }
  }

  @Test func connectStreamingEnvelopesAndEndStream() async throws {
    try await withWebServer { server in
      let answer = try await curlHTTP2(
        server.port, "/test.Stream/Count", contentType: "application/connect+proto", body: envelope(0, [9, 9, 9]))
      #expect(answer.status == 200)
      #expect(answer.headers["content-type"] == "application/connect+proto")
      let frames = envelopes(answer.body)
      #expect(frames.map(\.0) == [0, 0, 0, 2])
      #expect(frames.prefix(3).map(\.1) == [[0], [1], [2]])
      #expect(String(decoding: frames.last?.1 ?? [], as: UTF8.self) == "{}")
      // An error ends the stream with the error in the end-stream message, still HTTP 200.
      let failed = try await curlHTTP2(
        server.port, "/subs.bench.v1.Bench/CheckEligibility", contentType: "application/connect+json",
        body: envelope(0, Array(#"{"userId":"u"}"#.utf8)))
      #expect(failed.status == 200)
      let end = try #require(envelopes(failed.body).last)
      #expect(end.0 == 2)
      let json = try JSONValue(parsing: String(decoding: end.1, as: UTF8.self))
      #expect(json["error"]?["code"]?.stringValue == "invalid_argument")
      #expect(json["error"]?["details"]?.arrayValue?.count == 1)
    }
  }

  @Test func grpcWebTextOverCurl() async throws {
    try await withWebServer { server in
      var request = Subs_Bench_V1_EchoRequest()
      request.payload = [1, 2, 3]
      var text = HeaderCoding.base64Encode(envelope(0, request.serializedBytes()))
      while text.utf8.count % 4 != 0 { text += "=" }
      let answer = try await curlHTTP2(
        server.port, "/subs.bench.v1.Bench/Echo", contentType: "application/grpc-web-text", body: Array(text.utf8),
        headers: ["x-grpc-web: 1"])
      #expect(answer.status == 200)
      #expect(answer.headers["content-type"] == "application/grpc-web-text")
      #expect(answer.headers["x-protocol"] == "grpc-web")
      // Each write is base64 on its own (padded): every 4-character quantum decodes on its own.
      let characters = Array(answer.text)
      #expect(characters.count % 4 == 0)
      var binary: [UInt8] = []
      for start in stride(from: 0, to: characters.count, by: 4) {
        binary += try #require(HeaderCoding.base64Decode(String(characters[start..<(start + 4)])))
      }
      let frames = envelopes(binary)
      #expect(frames.count == 2)
      #expect(try Subs_Bench_V1_EchoReply(serializedBytes: frames[0].1).payload == [1, 2, 3])
      #expect(frames[1].0 == 0x80)
      let trailers = String(decoding: frames[1].1, as: UTF8.self)
      #expect(trailers.hasPrefix("grpc-status: 0\r\n"))
      #expect(trailers.contains("x-codec: proto\r\n"))
    }
  }

  struct StreamErrorCase: Sendable, CustomStringConvertible {
    var name: String
    var path: String
    var body: [UInt8]
    var headers: [String] = []
    var code: RPCError.Code
    var message: String
    var description: String { name }
  }

  static let streamErrors: [StreamErrorCase] = [
    StreamErrorCase(
      name: "unknown method", path: "/subs.bench.v1.Bench/Nope", body: envelope(0, []), code: .unimplemented,
      message: "unknown method Nope"),
    StreamErrorCase(
      name: "bad body", path: "/subs.bench.v1.Bench/Echo", body: envelope(0, [0x0A, 9, 1]), code: .internal,
      message: "failed to decode subs.bench.v1.EchoRequest"),
    StreamErrorCase(
      name: "truncated envelope", path: "/subs.bench.v1.Bench/Echo", body: Array(envelope(0, [1, 2, 3]).prefix(6)),
      code: .internal, message: "ends inside a message envelope"),
    StreamErrorCase(
      name: "oversized", path: "/subs.bench.v1.Bench/Echo", body: envelope(0, [UInt8](repeating: 1, count: 100)),
      code: .resourceExhausted, message: "message size 100 is larger than configured max 64"),
    StreamErrorCase(
      name: "deadline", path: "/subs.bench.v1.Bench/CheckEligibility", body: envelope(0, [0x0A, 4] + Array("slow".utf8)),
      headers: ["grpc-timeout: 100m", "connect-timeout-ms: 100"], code: .deadlineExceeded, message: "deadline exceeded"),
    StreamErrorCase(
      name: "compressed", path: "/subs.bench.v1.Bench/Echo", body: envelope(1, [1]), code: .internal,
      message: "compress"),
  ]

  /// gRPC-Web (status in the head for Trailers-Only, else in the trailer frame) and Connect
  /// streaming (HTTP 200, the error in the end-stream message) answer the same errors.
  @Test(arguments: ["application/grpc-web", "application/connect+proto"], streamErrors)
  func envelopedProtocolsAnswerErrorsInBand(_ contentType: String, _ row: StreamErrorCase) async throws {
    try await withWebServer(configure: { $0.maxReceiveMessageSize = 64 }) { server in
      let answer = try await curlHTTP2(server.port, row.path, contentType: contentType, body: row.body, headers: row.headers)
      #expect(answer.status == 200)
      #expect(answer.headers["content-type"] == contentType)
      if contentType == "application/grpc-web" {
        var status = answer.headers["grpc-status"]
        var message = answer.headers["grpc-message"]
        if status == nil, let trailer = envelopes(answer.body).last, trailer.0 == 0x80 {
          for line in String(decoding: trailer.1, as: UTF8.self).split(separator: "\r\n") {
            if line.hasPrefix("grpc-status: ") { status = String(line.dropFirst(13)) }
            if line.hasPrefix("grpc-message: ") { message = String(line.dropFirst(14)) }
          }
        }
        #expect(status == String(row.code.rawValue), "\(answer.headers) \(answer.text)")
        // A status before any message is Trailers-Only: in the head, no body.
        if row.name == "unknown method" { #expect(answer.headers["grpc-status"] != nil && answer.body.isEmpty) }
        #expect(HeaderCoding.percentDecode(message ?? "").contains(row.message), "\(message ?? "")")
      } else {
        let end = try #require(envelopes(answer.body).last)
        #expect(end.0 == 2)
        let json = try JSONValue(parsing: String(decoding: end.1, as: UTF8.self))
        #expect(json["error"]?["code"]?.stringValue == row.code.description.lowercased(), "\(json)")
        #expect(json["error"]?["message"]?.stringValue?.contains(row.message) == true, "\(json)")
      }
    }
  }

  @Test func corsPreflightAndResponseHeaders() async throws {
    try await withWebServer(configure: { $0.corsAllowedOrigins = ["https://console.example"] }) { server in
      let preflight = try await curlHTTP2(
        server.port, "/subs.bench.v1.Bench/Echo", contentType: nil, body: [],
        headers: [
          "origin: https://console.example", "access-control-request-method: POST",
          "access-control-request-headers: content-type,connect-protocol-version,authorization",
        ], method: "OPTIONS")
      #expect(preflight.status == 204)
      #expect(preflight.headers["access-control-allow-origin"] == "https://console.example")
      #expect(preflight.headers["access-control-allow-methods"] == "POST")
      #expect(preflight.headers["access-control-allow-headers"]?.contains("Authorization") == true)
      let refused = try await curlHTTP2(
        server.port, "/subs.bench.v1.Bench/Echo", contentType: nil, body: [],
        headers: ["origin: https://evil.example", "access-control-request-method: POST"], method: "OPTIONS")
      #expect(refused.status == 403)
      #expect(refused.headers["access-control-allow-origin"] == nil)
      let actual = try await curlHTTP2(
        server.port, "/subs.bench.v1.Bench/Echo", contentType: "application/json", body: Array("{}".utf8),
        headers: ["origin: https://console.example"])
      #expect(actual.status == 200)
      #expect(actual.headers["access-control-allow-origin"] == "https://console.example")
      #expect(actual.headers["access-control-expose-headers"]?.contains("Grpc-Status") == true)
    }
  }

  @Test func noCORSByDefault() async throws {
    try await withWebServer { server in
      let preflight = try await curlHTTP2(
        server.port, "/subs.bench.v1.Bench/Echo", contentType: nil, body: [],
        headers: ["origin: https://console.example", "access-control-request-method: POST"], method: "OPTIONS")
      #expect(preflight.status == 403)
      let actual = try await curlHTTP2(
        server.port, "/subs.bench.v1.Bench/Echo", contentType: "application/json", body: Array("{}".utf8),
        headers: ["origin: https://console.example"])
      #expect(actual.headers["access-control-allow-origin"] == nil)
    }
  }
}

/// The Python `connectrpc` client (PyPI) over HTTP/2 with prior knowledge (pyqwest's HTTP/2
/// transport), in Connect and gRPC-Web, binary and JSON.
@Suite(.serialized) struct ConnectPythonHTTP2Tests {
  @Test(arguments: ["connect", "grpc-web"], ["proto", "json"])
  func callsAndErrors(_ rpcProtocol: String, codec: String) async throws {
    try await withWebServer { server in
      for name in ["unary", "error", "deadline", "gzip", "duplex"] {
        let result = try await runProcess(
          python,
          [
            fixture("connect_python_client.py"), String(server.port), packageRoot.appendingPathComponent("Protos").path,
            rpcProtocol, codec, name,
          ], timeout: .seconds(60))
        #expect(result.status == 0, "\(rpcProtocol) \(codec) \(name):\n\(result.stdout)\n\(result.stderr)")
        #expect(result.stdout.contains("PASS \(name)"))
      }
    }
  }
}

@Suite(.serialized) struct WebProtocolsTLSTests {
  /// Connect (curl, JSON) and buf curl in every protocol, with reflection, over TLS (ALPN h2).
  @Test func connectAndGRPCWebOverTLS() async throws {
    try await withTestPKI { pki in
      try await withWebServer(configure: { $0.tls = serverTLS(pki) }) { server in
        let url = "https://127.0.0.1:\(server.port)/subs.bench.v1.Bench/CheckEligibility"
        let curl = try await runProcess(
          "/usr/bin/curl",
          [
            "-sS", "--cacert", pki.path("ca.pem"), "-H", "content-type: application/json", "-d",
            #"{"appId":"a","productIds":["p1"]}"#, "-w", "\n%{http_version}", url,
          ], timeout: .seconds(30))
        #expect(curl.status == 0, "\(curl.stderr)")
        #expect(curl.stdout == "{\"results\":[{\"productId\":\"p1\",\"introEligible\":true}]}\n2", "\(curl.stdout)")
        for rpcProtocol in ["connect", "grpcweb", "grpc"] {
          let buf = try await runProcess(
            bufCLI,
            ["curl", "--cacert", pki.path("ca.pem"), "--protocol", rpcProtocol, "-d", #"{"appId":"a","productIds":["p2"]}"#, url],
            timeout: .seconds(60))
          #expect(buf.status == 0, "\(rpcProtocol): \(buf.stderr)")
          #expect(buf.stdout.contains(#""productId": "p2""#), "\(rpcProtocol): \(buf.stdout)")
        }
      }
    }
  }
}

/// Connect and gRPC-Web calls meet the same call budget, cancellation and metrics as gRPC calls.
@Suite(.serialized) struct WebProtocolsLimitsTests {
  @Test(arguments: ["application/proto", "application/grpc-web"])
  func callBudgetCancellationAndMetrics(_ contentType: String) async throws {
    try await withTestServer(configure: { $0.maxCallsInFlight = 1 }) { server in
      let body = Array("20000".utf8)
      let request = contentType == "application/proto" ? body : envelope(0, body)
      // A call that sleeps holds the only slot; curl gives up after a second (RST_STREAM).
      let file = FileManager.default.temporaryDirectory.appendingPathComponent("web19-sleep-\(UUID().uuidString)")
      try Data(request).write(to: file)
      defer { try? FileManager.default.removeItem(at: file) }
      async let slow = runProcess(
        "/usr/bin/curl",
        [
          "-sS", "--http2-prior-knowledge", "--max-time", "1", "-H", "content-type: \(contentType)", "--data-binary",
          "@" + file.path, "http://127.0.0.1:\(server.port)/interop.Test/Sleep",
        ], timeout: .seconds(30))
      #expect(await server.probe.waitUntil(timeout: .seconds(10)) { $0.sleepsStarted.withLock { $0 } == 1 })
      #expect(server.transport.metrics.callsInFlight == 1)
      let refused = try await curlHTTP2(server.port, "/interop.Test/Echo", contentType: contentType, body: request)
      if contentType == "application/proto" {
        #expect(refused.status == 429)
        let json = try JSONValue(parsing: refused.text)
        #expect(json["code"]?.stringValue == "resource_exhausted")
        #expect(json["details"]?.arrayValue?.first?["type"]?.stringValue == "google.rpc.RetryInfo")
        #expect(json["details"]?.arrayValue?.first?["debug"]?["retryDelay"]?.stringValue == "0.250s")
      } else {
        #expect(refused.headers["grpc-status"] == "8")
        #expect(refused.headers["grpc-status-details-bin"] != nil)
      }
      #expect(server.transport.metrics.callsRefused == 1)
      _ = try await slow
      // The client's reset cancelled the handler and gave the slot back.
      #expect(await server.probe.waitUntil(timeout: .seconds(10)) { $0.sleepsCancelled.withLock { $0 } == 1 })
      #expect(await waitUntil { server.transport.metrics.callsInFlight == 0 })
      let echoed = try await curlHTTP2(server.port, "/interop.Test/Echo", contentType: contentType, body: request)
      #expect(echoed.status == 200)
    }
  }
}
