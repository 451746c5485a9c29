import Foundation
import ProtoGen
import RPCCore
import RPCHTTP2Transport
import SubstatusJSON
import SubstatusWire
import Testing

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// Every string is whole (docs/architecture.md "Security"; issue 18): a NUL byte in any string
/// field of any request is INVALID_ARGUMENT naming the field, over real gRPC against a running
/// substatusd, and nothing is stored under a truncated id or secret.
@Suite(.serialized) struct WholeStringsEndToEndTests {
  /// One string field of one request type, reached through nested and repeated messages.
  struct StringField: CustomStringConvertible {
    let method: String
    let service: String
    /// The field's path, as the server must name it (`queries[0].user_id`).
    let path: String
    /// A request whose only set field, at `path`, holds "ok\0evil".
    let request: [UInt8]
    var description: String { "\(method) \(path)" }
  }

  /// Hand-made encodings: the generated encoder (protobuf-c's packer) cannot hold a NUL.
  static func varint(_ value: Int) -> [UInt8] {
    var v = UInt64(value)
    var out: [UInt8] = []
    while v >= 0x80 {
      out.append(UInt8(v & 0x7F) | 0x80)
      v >>= 7
    }
    return out + [UInt8(v)]
  }

  static func lengthDelimited(_ number: Int32, _ bytes: [UInt8]) -> [UInt8] {
    varint(Int(number) << 3 | 2) + varint(bytes.count) + bytes
  }

  /// Every unary method of the services the daemon serves with every string field of its request,
  /// read from the descriptors compiled into the server (`ProtoFiles`): a field or an RPC added
  /// later is covered without touching this test.
  static func stringFields() throws -> [StringField] {
    var set: [UInt8] = []
    for file in ProtoFiles.all { set += lengthDelimited(1, file.serializedDescriptor) }
    let files = try ProtoFileSet(serializedBytes: set).files
    var messages: [String: ProtoMessage] = [:]
    func index(_ m: ProtoMessage) {
      messages[m.fullName] = m
      m.messages.forEach(index)
    }
    files.flatMap(\.messages).forEach(index)

    /// (path, encoding) of every string field of a message, nested ones included.
    func strings(_ typeName: String, depth: Int) -> [(String, [UInt8])] {
      guard depth < 6, let message = messages[typeName] else { return [] }
      var out: [(String, [UInt8])] = []
      for field in message.fields {
        let name = field.name + (field.isRepeated ? "[0]" : "")
        switch field.kind {
        case .string:
          out.append((name, lengthDelimited(field.number, Array("ok\0evil".utf8))))
        case .message:
          for (path, bytes) in strings(field.typeName, depth: depth + 1) {
            out.append((name + "." + path, lengthDelimited(field.number, bytes)))
          }
        default: break
        }
      }
      return out
    }

    var fields: [StringField] = []
    for file in files {
      for service in file.services where service.fullName.hasPrefix("substatus.v1.") || service.fullName == "grpc.health.v1.Health" {
        for method in service.methods where !method.clientStreaming && !method.serverStreaming {
          for (path, bytes) in strings(method.inputType, depth: 0) {
            fields.append(StringField(method: "/\(service.fullName)/\(method.name)", service: service.fullName, path: path, request: bytes))
          }
        }
      }
    }
    return fields
  }

  /// Calls a method with raw request bytes and a key.
  static func call(_ client: DaemonClient, _ method: String, _ request: [UInt8], key: String?) async throws -> [UInt8] {
    var metadata: Metadata = [:]
    if let key { metadata.addString("Bearer \(key)", forKey: "authorization") }
    return try await client.transport.unary(method: method, request: request, metadata: metadata, options: CallOptions()).message
  }

  /// Expects INVALID_ARGUMENT whose google.rpc.BadRequest names `field`.
  static func expectFieldViolation(_ field: String, _ what: String, _ body: () async throws -> Void) async {
    do {
      try await body()
      Issue.record("\(what): expected INVALID_ARGUMENT naming \(field), got OK")
    } catch let error as RPCError {
      #expect(error.code == .invalidArgument, "\(what): \(error)")
      let details = error.metadata.firstBinary(forKey: "grpc-status-details-bin") ?? []
      let status = try? Google_Rpc_Status(serializedBytes: details)
      let violations = status?.details.compactMap { try? $0.unpack(Google_Rpc_BadRequest.self) }.flatMap(\.fieldViolations)
      #expect(violations?.map(\.field) == [field], "\(what): \(error)")
    } catch {
      Issue.record("\(what): \(error)")
    }
  }

  /// Replaces the byte 0x01 inside `marker` (unique in `bytes`) with a NUL: the generated encoder
  /// writes a valid request, this makes one of its strings hold a NUL.
  static func withNUL(_ bytes: [UInt8], at marker: String) throws -> [UInt8] {
    let needle = Array(marker.utf8)
    let start = try #require((0...(bytes.count - needle.count)).first { bytes[$0..<$0 + needle.count].elementsEqual(needle) })
    var out = bytes
    out[start + needle.firstIndex(of: 1)!] = 0
    return out
  }

  @Test func aNULInEveryStringFieldOfEveryRequestIsInvalidArgumentNamingTheField() async throws {
    let fields = try Self.stringFields()
    #expect(fields.count > 80, "\(fields.count) string fields")
    #expect(fields.contains { $0.path == "queries[0].product_ids[0]" })
    #expect(fields.contains { $0.path == "products[0].promotional_offer_ids[0]" })
    try await Self.withDaemon { daemon in try await Self.everyField(daemon, fields) }
  }

  /// Runs `body` against a fresh substatusd (started and stopped off the cooperative pool), then
  /// checks that it exits cleanly.
  static func withDaemon(_ body: (RunningDaemon) async throws -> Void) async throws {
    let daemon = try await RunningDaemon()
    do { try await body(daemon) } catch {
      _ = await daemon.stop()
      throw error
    }
    let (status, log) = await daemon.stop()
    #expect(status == 0, "substatusd exited \(status): \(log.suffix(2000))")
  }

  static func everyField(_ daemon: RunningDaemon, _ fields: [StringField]) async throws {
    let client = try DaemonClient(daemon)
    let (admin, app) = try await client.makeApp(operatorKey: daemon.operatorKey, bundleID: "com.example.whole", appleAppID: 0)
    func snapshot() async throws -> [[UInt8]] {
      [
        try await client.call(Substatus_V1_TenantService.listTenants, Substatus_V1_ListTenantsRequest(), key: daemon.operatorKey).serializedBytes(),
        try await client.call(Substatus_V1_AdminService.listApps, Substatus_V1_ListAppsRequest(), key: admin).serializedBytes(),
        try await client.call(Substatus_V1_AdminService.listApiKeys, Substatus_V1_ListApiKeysRequest(), key: admin).serializedBytes(),
        try await client.call(Substatus_V1_AdminService.listProducts, { var r = Substatus_V1_ListProductsRequest(); r.appID = app; return r }(), key: admin)
          .serializedBytes(),
      ]
    }
    let before = try await snapshot()
    for field in fields {
      let key = field.service == "substatus.v1.TenantService" ? daemon.operatorKey : field.service.hasPrefix("grpc.") ? nil : admin
      await expectFieldViolation(field.path, field.description) { _ = try await call(client, field.method, field.request, key: key) }
    }
    #expect(try await snapshot() == before, "a request with a NUL changed what is stored")
  }

  /// The three stories of issue 18, end to end.
  @Test func sharedSecretUserIdAndAppIdAreNeverCut() async throws {
    try await Self.withDaemon(Self.threeStories)
  }

  static func threeStories(_ daemon: RunningDaemon) async throws {
    let client = try DaemonClient(daemon)
    let (admin, app) = try await client.makeApp(operatorKey: daemon.operatorKey, bundleID: "com.example.cut", appleAppID: 0)

    // 1. SetSharedSecret("a\0…") stored "a", and a V1 notification with password "a" was accepted.
    var secret = Substatus_V1_SetSharedSecretRequest()
    secret.appID = app
    secret.sharedSecret = "the-right-secret"
    _ = try await client.call(Substatus_V1_AdminService.setSharedSecret, secret, key: admin)
    var getApp = Substatus_V1_GetAppRequest()
    getApp.appID = app
    let fingerprint = try await client.call(Substatus_V1_AdminService.getApp, getApp, key: admin).app?.sharedSecretFingerprint
    secret.sharedSecret = "a\u{1}-rest-of-a-long-secret"
    let cutSecret = try withNUL(secret.serializedBytes(), at: "a\u{1}-rest")
    await expectFieldViolation("shared_secret", "SetSharedSecret") {
      _ = try await call(client, Substatus_V1_AdminService.setSharedSecret.path, cutSecret, key: admin)
    }
    #expect(try await client.call(Substatus_V1_AdminService.getApp, getApp, key: admin).app?.sharedSecretFingerprint == fingerprint)
    let url = "http://\(daemon.http)/v1/apps/\(app)/apple/notifications"
    func notify(_ password: String) async throws -> Int {
      try await postJSON(url, .object(["notification_type": .string("DID_RENEW"), "password": .string(password), "environment": .string("PROD")])).0
    }
    #expect(try await notify("a") == 401)
    #expect(try await notify("the-right-secret") == 200)

    // 2. A transaction for user "victim\0evil" landed in "victim".
    var importRequest = Substatus_V1_ImportTransactionsRequest()
    importRequest.appID = app
    importRequest.userID = "victim\u{1}evil"
    var transaction = Substatus_V1_Transaction()
    transaction.transactionID = "2000000000000001"
    transaction.originalTransactionID = "2000000000000001"
    transaction.productID = "pro.monthly"
    transaction.purchaseDateMs = 1_700_000_000_000
    transaction.expiresDateMs = 1_702_592_000_000
    importRequest.transactions = [transaction]
    let cutUser = try withNUL(importRequest.serializedBytes(), at: "victim\u{1}evil")
    await expectFieldViolation("user_id", "ImportTransactions") {
      _ = try await call(client, Substatus_V1_IngestService.importTransactions.path, cutUser, key: admin)
    }
    var history = Substatus_V1_GetTransactionHistoryRequest()
    history.appID = app
    history.userID = "victim"
    #expect(try await client.call(Substatus_V1_StatusService.getTransactionHistory, history, key: admin).transactions.isEmpty)

    // 3. An app id with "\0garbage" appended was taken as that app.
    importRequest.userID = "someone"
    importRequest.appID = app + "\u{1}garbage"
    let cutApp = try withNUL(importRequest.serializedBytes(), at: "\u{1}garbage")
    await expectFieldViolation("app_id", "ImportTransactions") {
      _ = try await call(client, Substatus_V1_IngestService.importTransactions.path, cutApp, key: admin)
    }
    history.userID = "someone"
    #expect(try await client.call(Substatus_V1_StatusService.getTransactionHistory, history, key: admin).transactions.isEmpty)
    // The same request without the NUL's damage is stored: the checks above are not vacuous.
    importRequest.appID = app
    _ = try await client.call(Substatus_V1_IngestService.importTransactions, importRequest, key: admin)
    #expect(try await client.call(Substatus_V1_StatusService.getTransactionHistory, history, key: admin).transactions.count == 1)
  }
}
