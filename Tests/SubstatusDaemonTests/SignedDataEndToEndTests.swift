import AppStoreSignedData
import Foundation
import RPCCore
import RPCHTTP2Transport
import SubstatusDaemon
import SubstatusJSON
import SubstatusWire
import Testing

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// A gRPC client of a running substatusd with a key.
struct DaemonClient: Sendable {
  let client: RPCClient
  let transport: HTTP2ClientTransport

  init(_ daemon: RunningDaemon) throws {
    let address = try #require(HostPort(daemon.grpc))
    transport = try HTTP2ClientTransport(configuration: .init(host: address.host, port: address.port))
    client = RPCClient(transport: transport)
  }

  func call<Req: ProtobufMessage, Res: ProtobufMessage>(
    _ method: ProtoMethodDescriptor<Req, Res>, _ request: Req, key: String
  ) async throws -> Res {
    var metadata: Metadata = [:]
    metadata.addString("Bearer \(key)", forKey: "authorization")
    return try await client.unary(method: method.path, request: request, response: Res.self, metadata: metadata)
  }

  /// A tenant with one app (bundle id, Apple app id) and a monthly subscription; returns the admin key and app id.
  func makeApp(operatorKey: String, bundleID: String, appleAppID: Int64) async throws -> (String, String) {
    var createTenant = Substatus_V1_CreateTenantRequest()
    createTenant.name = "signed"
    let admin = try await call(Substatus_V1_TenantService.createTenant, createTenant, key: operatorKey).adminKey
    var register = Substatus_V1_RegisterAppRequest()
    register.bundleID = bundleID
    register.appleAppID = appleAppID
    let appID = try #require(try await call(Substatus_V1_AdminService.registerApp, register, key: admin).app?.appID)
    var product = Substatus_V1_Product()
    product.productID = "pro.monthly"
    product.type = .autoRenewable
    product.subscriptionGroupID = "pro"
    product.duration = "P1M"
    var put = Substatus_V1_PutProductsRequest()
    put.appID = appID
    put.products = [product]
    _ = try await call(Substatus_V1_AdminService.putProducts, put, key: admin)
    return (admin, appID)
  }

  func status(appID: String, user: String, environment: Substatus_V1_Environment, key: String) async throws -> Substatus_V1_GroupStatus? {
    var request = Substatus_V1_GetStatusRequest()
    request.appID = appID
    request.userID = user
    request.environment = environment
    return try await call(Substatus_V1_StatusService.getStatus, request, key: key).groups.first { $0.subscriptionGroupID == "pro" }
  }
}

/// POSTs a JSON body over real HTTP; returns the status and the decoded answer.
func postJSON(_ url: String, _ body: JSONValue) async throws -> (Int, JSONValue?) {
  var request = URLRequest(url: try #require(URL(string: url)))
  request.httpMethod = "POST"
  request.httpBody = Data(body.serializedBytes())
  request.setValue("application/json", forHTTPHeaderField: "Content-Type")
  let (data, response) = try await URLSession.shared.data(for: request)
  return ((response as? HTTPURLResponse)?.statusCode ?? 0, try? JSONValue(parsing: [UInt8](data)))
}

@Suite struct AppleRootConfigurationTests {
  @Test func rootsFromFileEnvironmentAndRepeatedFlags() throws {
    let defaults = try #require(try DaemonConfiguration.parse(arguments: ["--data-dir", "/d"], environment: [:]))
    #expect(defaults.appleRootCAFiles.isEmpty)  // Apple Root CA - G3
    let file: [UInt8] = Array(#"{"data_dir": "/d", "apple_root_ca": ["/etc/a.pem", "/etc/b.pem"]}"#.utf8)
    let fromFile = try #require(try DaemonConfiguration.parse(arguments: ["--config", "c.json"], environment: [:], readFile: { _ in file }))
    #expect(fromFile.appleRootCAFiles == ["/etc/a.pem", "/etc/b.pem"])
    let fromEnvironment = try #require(try DaemonConfiguration.parse(
      arguments: ["--config", "c.json"], environment: ["SUBSTATUS_APPLE_ROOT_CA": "/env/c.pem:/env/d.pem"], readFile: { _ in file }))
    #expect(fromEnvironment.appleRootCAFiles == ["/env/c.pem", "/env/d.pem"])
    let fromFlags = try #require(try DaemonConfiguration.parse(
      arguments: ["--config", "c.json", "--apple-root-ca", "/f/e.pem", "--apple-root-ca=/f/f.pem"],
      environment: ["SUBSTATUS_APPLE_ROOT_CA": "/env/c.pem"], readFile: { _ in file }))
    #expect(fromFlags.appleRootCAFiles == ["/f/e.pem", "/f/f.pem"])
    let single: [UInt8] = Array(#"{"data_dir": "/d", "apple_root_ca": "/etc/one.pem"}"#.utf8)
    #expect(try DaemonConfiguration.parse(arguments: ["--config", "c.json"], environment: [:], readFile: { _ in single })?.appleRootCAFiles == ["/etc/one.pem"])
    #expect(throws: DaemonConfiguration.UsageError.self) {
      try DaemonConfiguration.parse(arguments: ["--config", "c.json"], environment: [:], readFile: { _ in Array(#"{"data_dir": "/d", "apple_root_ca": [1]}"#.utf8) })
    }
    #expect(throws: DaemonConfiguration.UsageError.self) {
      try DaemonConfiguration.parse(arguments: ["--data-dir", "/d"], environment: ["SUBSTATUS_APPLE_ROOT_CA": "/a.pem::/b.pem"])
    }
  }

  @Test func unreadableOrEmptyRootFileStopsTheStart() async throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("roots-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let empty = directory.appendingPathComponent("empty.pem").path
    try Data("no certificates here\n".utf8).write(to: URL(fileURLWithPath: empty))
    for (file, message) in [(directory.appendingPathComponent("missing.pem").path, "--apple-root-ca"), (empty, "empty.pem")] {
      let (code, out, err) = try await run(
        try builtExecutable("substatusd"),
        ["--data-dir", directory.appendingPathComponent("data").path, "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--apple-root-ca", file])
      #expect(code == 2, "\(out)\(err)")
      #expect(err.contains(message), "\(err)")
    }
  }
}

/// Real substatusd (SQLite file, real gRPC and HTTP) trusting a test root given with
/// `--apple-root-ca`; the test signs Apple's data itself with a chain under that root.
@Suite(.serialized) struct SignedDataEndToEndTests {
  @Test func notificationsAndSignedTransactionsThroughTheDaemon() async throws {
    let ca = try TestCertificateAuthority.make()
    let identity = try ca.issueSigningIdentity()
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("signed-e2e-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    // A bundle with an unrelated certificate first: every certificate of the file is trusted.
    let bundle = directory.appendingPathComponent("roots.pem").path
    try (try TestCertificateAuthority.make(commonName: "Unrelated").root.pem + ca.root.pem).write(toFile: bundle, atomically: true, encoding: .utf8)
    let daemon = try await RunningDaemon(extraArguments: ["--apple-root-ca", bundle])
    let client = try DaemonClient(daemon)
    defer { client.transport.close() }
    let bundleID = "com.example.signed"
    let appleAppID: Int64 = 987_654_321
    let (admin, appID) = try await client.makeApp(operatorKey: daemon.operatorKey, bundleID: bundleID, appleAppID: appleAppID)
    let url = "http://\(daemon.http)/v1/apps/\(appID)/apple/notifications"
    let now = Int64(Date().timeIntervalSince1970 * 1000)
    let day: Int64 = 86_400_000

    func transaction(_ id: String, revoked: Bool = false) -> JSONValue {
      var o: JSONObject = [
        "transactionId": .string(id), "originalTransactionId": .string("5000"), "bundleId": .string(bundleID),
        "productId": .string("pro.monthly"), "subscriptionGroupIdentifier": .string("pro"), "purchaseDate": .integer(now - day),
        "originalPurchaseDate": .integer(now - day), "expiresDate": .integer(now + 29 * day),
        "type": .string("Auto-Renewable Subscription"), "inAppOwnershipType": .string("PURCHASED"), "signedDate": .integer(now),
        "environment": .string("Production"),
      ]
      if revoked { o.append("revocationDate", .integer(now - 1000)); o.append("revocationReason", .integer(1)) }
      return .object(o)
    }
    func notification(_ type: String, subtype: String? = nil, uuid: String = UUID().uuidString, transaction: String) throws -> JSONValue {
      var o: JSONObject = [
        "notificationType": .string(type), "notificationUUID": .string(uuid), "version": .string("2.0"), "signedDate": .integer(now),
        "data": .object([
          "appAppleId": .integer(appleAppID), "bundleId": .string(bundleID), "environment": .string("Production"),
          "signedTransactionInfo": .string(transaction), "status": .integer(1),
        ]),
      ]
      if let subtype { o.append("subtype", .string(subtype)) }
      return .object(["signedPayload": .string(try identity.signedJWS(payload: .object(o)))])
    }

    // The app hands over the purchase (StoreKit 2) for user "ann".
    var submit = Substatus_V1_SubmitSignedTransactionsRequest()
    submit.appID = appID
    submit.userID = "ann"
    submit.signedTransactions = [try identity.signedJWS(payload: transaction("5000"))]
    let submitted = try await client.call(Substatus_V1_IngestService.submitSignedTransactions, submit, key: admin)
    #expect(submitted.transactionResults.map(\.outcome) == [.created])
    #expect(submitted.environment == .production)
    #expect(submitted.groups.first { $0.subscriptionGroupID == "pro" }?.state == .active)

    // Apple's V2 notification for the purchase, retried once: applied once.
    let subscribed = try notification("SUBSCRIBED", subtype: "INITIAL_BUY", transaction: try identity.signedJWS(payload: transaction("5000")))
    #expect(try await postJSON(url, subscribed).1?["status"]?.stringValue == "applied")
    #expect(try await postJSON(url, subscribed).1?["status"]?.stringValue == "duplicate")
    // A refund: REVOKED.
    let refund = try notification("REFUND", transaction: try identity.signedJWS(payload: transaction("5000", revoked: true)))
    let (refundStatus, refundBody) = try await postJSON(url, refund)
    #expect(refundStatus == 200, "\(String(describing: refundBody))")
    #expect(try await client.status(appID: appID, user: "ann", environment: .production, key: admin)?.state == .revoked)
    // Data under a root the daemon does not trust: 401 naming the reason.
    let stranger = try TestCertificateAuthority.make().issueSigningIdentity()
    var forged = try notification("DID_RENEW", transaction: try identity.signedJWS(payload: transaction("5001")))
    forged = .object(["signedPayload": .string(try stranger.signedJWS(payload: UnsignedPayload.of(forged)))])
    let (forgedStatus, forgedBody) = try await postJSON(url, forged)
    #expect(forgedStatus == 401)
    #expect(forgedBody?["error"]?["reason"]?.stringValue == "UNTRUSTED_CHAIN")

    let (exitStatus, log) = await daemon.stop()
    #expect(exitStatus == 0)
    #expect(log.contains("\"type\":\"REFUND\""))
    #expect(!log.contains(String(submit.signedTransactions[0].prefix(60))))
  }
}

/// Reads back the payload of a test-signed `{"signedPayload": JWS}` body (no verification).
enum UnsignedPayload {
  static func of(_ body: JSONValue) throws -> JSONValue {
    let jws = try #require(body["signedPayload"]?.stringValue)
    let parts = jws.split(separator: ".")
    return try JSONValue(parsing: try #require(Base64URL.decode(parts[1])))
  }
}
