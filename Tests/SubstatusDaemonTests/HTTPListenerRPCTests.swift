import Foundation
import SubstatusWire
import Testing

/// One exchange with curl: status, header fields (names lower-cased), body.
private struct CurlExchange {
  var status: Int
  var headers: [String: String]
  var body: Data
  var text: String { String(decoding: body, as: UTF8.self) }
  func json() throws -> [String: Any] { try JSONSerialization.jsonObject(with: body) as? [String: Any] ?? [:] }
}

/// Runs curl against the daemon's HTTP listener (off the cooperative pool).
private func curl(_ arguments: [String], body: Data? = nil) async throws -> CurlExchange {
  let directory = FileManager.default.temporaryDirectory.appendingPathComponent("curl-\(UUID().uuidString)")
  try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
  defer { try? FileManager.default.removeItem(at: directory) }
  let output = directory.appendingPathComponent("body").path
  var extra: [String] = []
  if let body {
    let input = directory.appendingPathComponent("request")
    try body.write(to: input)
    extra = ["--data-binary", "@" + input.path]
  }
  let (code, headerText, error) = try await run(
    "/usr/bin/curl", ["-sS", "--max-time", "20", "-D", "-", "-o", output] + extra + arguments)
  #expect(code == 0, "curl failed: \(error)")
  var status = 0
  var headers: [String: String] = [:]
  for line in headerText.split(separator: "\r\n") {
    if line.hasPrefix("HTTP/") {
      status = Int(line.split(separator: " ")[1]) ?? 0
      headers = [:]
    } else if let colon = line.firstIndex(of: ":") {
      headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
    }
  }
  return CurlExchange(status: status, headers: headers, body: (try? Data(contentsOf: URL(fileURLWithPath: output))) ?? Data())
}

/// A message in a 5-byte envelope (gRPC-Web, Connect streaming).
private func enveloped(_ message: [UInt8], flags: UInt8 = 0) -> [UInt8] {
  let n = UInt32(message.count)
  return [flags, UInt8(n >> 24), UInt8(truncatingIfNeeded: n >> 16), UInt8(truncatingIfNeeded: n >> 8), UInt8(truncatingIfNeeded: n)] + message
}

/// The envelopes of a body: (flags, payload).
private func envelopes(_ body: [UInt8]) -> [(flags: UInt8, payload: [UInt8])] {
  var out: [(UInt8, [UInt8])] = []
  var i = 0
  while i + 5 <= body.count {
    let n = Int(body[i + 1]) << 24 | Int(body[i + 2]) << 16 | Int(body[i + 3]) << 8 | Int(body[i + 4])
    guard i + 5 + n <= body.count else { break }
    out.append((body[i], Array(body[(i + 5)..<(i + 5 + n)])))
    i += 5 + n
  }
  return out
}

/// The RPCs on substatusd's HTTP/1.1 listener, met as a user meets them: curl with JSON (the
/// README's one-liner), Connect binary, gRPC-Web and gRPC-Web text, CORS, errors, `buf curl`.
@Suite(.serialized) struct HTTPListenerRPCTests {
  private static let origin = "https://console.example.com"

  /// A tenant's admin key, an app, and the daemon.
  private func withTenant(
    _ body: (_ daemon: RunningDaemon, _ adminKey: String, _ appId: String) async throws -> Void
  ) async throws {
    let daemon = try await RunningDaemon(extraArguments: ["--cors-origin", Self.origin])
    do {
      let tenant = try await curl(
        ["-H", "Authorization: Bearer \(daemon.operatorKey)", "-H", "Content-Type: application/json",
         "-d", #"{"name":"acme"}"#, "http://\(daemon.http)/substatus.v1.TenantService/CreateTenant"])
      #expect(tenant.status == 200, "\(tenant.text)")
      let adminKey = try #require(try tenant.json()["adminKey"] as? String)
      let app = try await curl(
        ["-H", "Authorization: Bearer \(adminKey)", "-H", "Content-Type: application/json",
         "-d", #"{"bundleId":"com.example.app"}"#, "http://\(daemon.http)/substatus.v1.AdminService/RegisterApp"])
      #expect(app.status == 200, "\(app.text)")
      let appId = try #require((try app.json()["app"] as? [String: Any])?["appId"] as? String)
      try await body(daemon, adminKey, appId)
    } catch {
      _ = await daemon.stop()
      throw error
    }
    let (status, log) = await daemon.stop()
    #expect(status == 0)
    #expect(!log.contains(daemon.operatorKey), "the log holds the operator key")
    // The access log says which protocol and codec each call used, and who called from where.
    #expect(log.contains(#""method":"/substatus.v1.TenantService/CreateTenant","protocol":"connect","codec":"json","status":"OK""#))
    #expect(log.contains(#""peer":"ipv4:127.0.0.1:"#))
  }

  @Test func curlWithJSONAsTheREADMEShowsIt() async throws {
    try await withTenant { daemon, key, appId in
      let answer = try await curl(
        ["-H", "Authorization: Bearer \(key)", "-H", "Content-Type: application/json",
         "-d", #"{"appId":"\#(appId)","queries":[{"userId":"u1","productIds":["p1"]}]}"#,
         "http://\(daemon.http)/substatus.v1.EligibilityService/CheckEligibility"])
      #expect(answer.status == 200, "\(answer.text)")
      #expect(answer.headers["content-type"] == "application/json")
      let users = try #require(try answer.json()["users"] as? [[String: Any]])
      #expect(users.count == 1)
      // The listener's own routes keep precedence and work as before.
      #expect(try await curl(["http://\(daemon.http)/healthz"]).text.contains("ok"))
      let metrics = try await curl(["http://\(daemon.http)/metrics"]).text
      #expect(metrics.contains(#"substatus_rpcs_by_protocol_total{protocol="connect",code="OK"}"#))
      #expect(metrics.contains(#"substatus_rpcs_total{method="/substatus.v1.EligibilityService/CheckEligibility",code="OK"}"#))
    }
  }

  @Test func connectBinaryGRPCWebAndGRPCWebText() async throws {
    try await withTenant { daemon, key, appId in
      var request = Substatus_V1_CheckEligibilityRequest()
      request.appID = appId
      var query = Substatus_V1_EligibilityQuery()
      query.userID = "u1"
      query.productIDs = ["p1", "p2"]
      request.queries = [query]
      let url = "http://\(daemon.http)/substatus.v1.EligibilityService/CheckEligibility"
      let auth = ["-H", "Authorization: Bearer \(key)"]

      let connect = try await curl(
        auth + ["-H", "Content-Type: application/proto", "-H", "Connect-Protocol-Version: 1", url],
        body: Data(request.serializedBytes()))
      #expect(connect.status == 200)
      #expect(connect.headers["content-type"] == "application/proto")
      let reply = try Substatus_V1_CheckEligibilityResponse(serializedBytes: Array(connect.body))
      #expect(reply.users.first?.products.count == 2)

      let web = try await curl(
        auth + ["-H", "Content-Type: application/grpc-web+proto", "-H", "X-Grpc-Web: 1", url],
        body: Data(enveloped(request.serializedBytes())))
      #expect(web.status == 200)
      let frames = envelopes(Array(web.body))
      #expect(frames.count == 2)
      #expect(try Substatus_V1_CheckEligibilityResponse(serializedBytes: frames[0].payload).users.count == 1)
      #expect(frames.last?.flags == 0x80)
      let trailer = String(decoding: frames.last?.payload ?? [], as: UTF8.self)
      #expect(trailer.contains("grpc-status: 0"))

      let text = try await curl(
        auth + ["-H", "Content-Type: application/grpc-web-text", url],
        body: Data(Data(enveloped(request.serializedBytes())).base64EncodedString().utf8))
      #expect(text.status == 200)
      #expect(text.headers["content-type"] == "application/grpc-web-text")
      let decoded = try #require(Data(base64Encoded: text.body))
      let textFrames = envelopes(Array(decoded))
      #expect(textFrames.count == 2)
      #expect(try Substatus_V1_CheckEligibilityResponse(serializedBytes: textFrames[0].payload).users.count == 1)
    }
  }

  @Test func errorsAnswerAsEachProtocolSays() async throws {
    try await withTenant { daemon, key, appId in
      let url = "http://\(daemon.http)/substatus.v1.EligibilityService/CheckEligibility"
      let json = ["-H", "Content-Type: application/json"]
      // A bad key: 401 unauthenticated (Connect); grpc-status 16 (gRPC-Web, Trailers-Only).
      let badKey = try await curl(json + ["-H", "Authorization: Bearer sk_wrong", "-d", "{}", url])
      #expect(badKey.status == 401)
      #expect(try badKey.json()["code"] as? String == "unauthenticated")
      let badKeyWeb = try await curl(
        ["-H", "Authorization: Bearer sk_wrong", "-H", "Content-Type: application/grpc-web+proto", url],
        body: Data(enveloped([])))
      #expect(badKeyWeb.status == 200)
      #expect(badKeyWeb.headers["grpc-status"] == "16")
      // A bad argument: 400 invalid_argument with the field violation in details.
      let badArgument = try await curl(
        json + ["-H", "Authorization: Bearer \(key)", "-d", #"{"appId":"\#(appId)","queries":[{"userId":"","productIds":["p"]}],"asOfMs":"-5"}"#, url])
      #expect(badArgument.status == 400, "\(badArgument.text)")
      let error = try badArgument.json()
      #expect(error["code"] as? String == "invalid_argument")
      let details = try #require(error["details"] as? [[String: Any]])
      #expect(details.first?["type"] as? String == "google.rpc.BadRequest")
      #expect((details.first?["debug"] as? [String: Any]).map { "\($0)".contains("fieldViolations") } ?? true)
      // JSON that does not fit the message names the field.
      let misfit = try await curl(json + ["-H", "Authorization: Bearer \(key)", "-d", #"{"appId":7}"#, url])
      #expect(misfit.status == 400)
      #expect(try misfit.json()["message"] as? String ?? "" != "")
      // An unknown method: 501 unimplemented; an unknown media type: 415.
      let unknown = try await curl(json + ["-d", "{}", "http://\(daemon.http)/substatus.v1.EligibilityService/Nope"])
      #expect(unknown.status == 501)
      #expect(try unknown.json()["code"] as? String == "unimplemented")
      let media = try await curl(["-H", "Content-Type: text/plain", "-d", "x", url])
      #expect(media.status == 415)
      // An oversized body: resource_exhausted (429), before the body is read.
      let big = try await curl(json + ["-H", "Authorization: Bearer \(key)", url], body: Data(count: (4 << 20) + 1))
      #expect(big.status == 429)
      #expect(try big.json()["code"] as? String == "resource_exhausted")
      // A deadline already past: deadline_exceeded (504), the handler not run.
      let late = try await curl(json + ["-H", "Authorization: Bearer \(key)", "-H", "Connect-Timeout-Ms: 0", "-d", "{}", url])
      #expect(late.status == 504)
      #expect(try late.json()["code"] as? String == "deadline_exceeded")
      let lateWeb = try await curl(
        ["-H", "Content-Type: application/grpc-web+proto", "-H", "grpc-timeout: 0m", url], body: Data(enveloped([])))
      #expect(lateWeb.headers["grpc-status"] == "4")
      // The server keeps serving.
      let health = try await curl(json + ["-d", "{}", "http://\(daemon.http)/grpc.health.v1.Health/Check"])
      #expect(try health.json()["status"] as? String == "SERVING")
    }
  }

  @Test func corsPreflightForNamedOriginsOnly() async throws {
    try await withTenant { daemon, key, _ in
      let url = "http://\(daemon.http)/substatus.v1.EligibilityService/CheckEligibility"
      let allowed = try await curl(
        ["-X", "OPTIONS", "-H", "Origin: \(Self.origin)", "-H", "Access-Control-Request-Method: POST",
         "-H", "Access-Control-Request-Headers: authorization, content-type, x-custom", url])
      #expect(allowed.status == 204)
      #expect(allowed.headers["access-control-allow-origin"] == Self.origin)
      #expect(allowed.headers["access-control-allow-methods"] == "POST")
      let allowedHeaders = allowed.headers["access-control-allow-headers"]?.lowercased() ?? ""
      #expect(allowedHeaders.contains("authorization") && allowedHeaders.contains("x-custom"))
      let refused = try await curl(
        ["-X", "OPTIONS", "-H", "Origin: https://elsewhere.example", "-H", "Access-Control-Request-Method: POST", url])
      #expect(refused.status == 403)
      #expect(refused.headers["access-control-allow-origin"] == nil)
      // The actual call from the allowed origin exposes what Connect and gRPC-Web clients read.
      let call = try await curl(
        ["-H", "Origin: \(Self.origin)", "-H", "Authorization: Bearer \(key)", "-H", "Content-Type: application/json",
         "-d", "{}", "http://\(daemon.http)/substatus.v1.AdminService/ListApps"])
      #expect(call.status == 200)
      #expect(call.headers["access-control-allow-origin"] == Self.origin)
      #expect(call.headers["access-control-expose-headers"]?.contains("Grpc-Status") == true)
      // --cors-origin reaches the gRPC port (HTTP/2) too.
      let grpcPort = try await curl(
        ["--http2-prior-knowledge", "-X", "OPTIONS", "-H", "Origin: \(Self.origin)",
         "-H", "Access-Control-Request-Method: POST", "http://\(daemon.grpc)/substatus.v1.AdminService/ListApps"])
      #expect(grpcPort.status == 204)
      #expect(grpcPort.headers["access-control-allow-origin"] == Self.origin)
      let other = try await curl(
        ["-H", "Origin: https://elsewhere.example", "-H", "Content-Type: application/json", "-d", "{}",
         "http://\(daemon.http)/grpc.health.v1.Health/Check"])
      #expect(other.headers["access-control-allow-origin"] == nil)
    }
  }

  @Test(arguments: ["connect", "grpcweb"])
  func bufCurlOverHTTP1(protocolName: String) async throws {
    let buf = packageRoot.appendingPathComponent(".venv/bin/buf").path
    try #require(FileManager.default.isExecutableFile(atPath: buf), "run scripts/install-deps --test")
    try await withTenant { daemon, key, appId in
      let (code, out, err) = try await run(
        buf,
        ["curl", "--protocol", protocolName, "--schema", packageRoot.appendingPathComponent("Protos").path,
         "-H", "Authorization: Bearer \(key)", "-d", #"{"appId":"\#(appId)"}"#,
         "http://\(daemon.http)/substatus.v1.AdminService/GetApp"])
      #expect(code == 0, "buf curl failed: \(err)")
      #expect(out.contains("com.example.app"))
      let (badCode, _, badErr) = try await run(
        buf,
        ["curl", "--protocol", protocolName, "--schema", packageRoot.appendingPathComponent("Protos").path,
         "-H", "Authorization: Bearer sk_wrong", "-d", #"{"appId":"\#(appId)"}"#,
         "http://\(daemon.http)/substatus.v1.AdminService/GetApp"])
      #expect(badCode != 0)
      #expect(badErr.contains("unauthenticated"))
    }
  }

  /// Connect clients gzip their requests by default (the Python connectrpc client does): a gzipped
  /// body is read, and a reply of 1 KiB or more comes back gzipped to a caller that accepts it.
  @Test func gzipBothWaysAsConnectClientsSendIt() async throws {
    try await withTenant { daemon, key, appId in
      let products = (0..<60).map { "\"com.example.product.\($0)\"" }.joined(separator: ",")
      let json = #"{"appId":"\#(appId)","queries":[{"userId":"u1","productIds":[\#(products)]}]}"#
      let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gzip-\(UUID().uuidString)")
      try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
      defer { try? FileManager.default.removeItem(at: directory) }
      let plain = directory.appendingPathComponent("request.json")
      try Data(json.utf8).write(to: plain)
      let (gzipCode, _, gzipError) = try await run("/bin/gzip", ["-k", plain.path])
      #expect(gzipCode == 0, "\(gzipError)")
      let gzipped = try Data(contentsOf: URL(fileURLWithPath: plain.path + ".gz"))
      let answer = try await curl(
        ["--compressed", "-H", "Authorization: Bearer \(key)", "-H", "Content-Type: application/json",
         "-H", "Content-Encoding: gzip", "http://\(daemon.http)/substatus.v1.EligibilityService/CheckEligibility"],
        body: gzipped)
      #expect(answer.status == 200, "\(answer.text)")
      #expect(answer.headers["content-encoding"] == "gzip")
      let users = try #require(try answer.json()["users"] as? [[String: Any]])
      #expect((users.first?["products"] as? [Any])?.count == 60)
      // An encoding the server does not speak is refused as the Connect specification says.
      let refused = try await curl(
        ["-H", "Authorization: Bearer \(key)", "-H", "Content-Type: application/json", "-H", "Content-Encoding: br",
         "http://\(daemon.http)/substatus.v1.EligibilityService/CheckEligibility"],
        body: Data(json.utf8))
      #expect(refused.status == 501)
      #expect(refused.headers["accept-encoding"] == "gzip,identity" || refused.headers["accept-encoding"] == "gzip, identity")
    }
  }
}
