import AppStoreSignedData
import Dispatch
import Foundation
import HTTPServer
import RPCCore
import RPCInProcessTransport
import SubscriptionDomain
import SubscriptionStorage
import SubscriptionStorageTesting
import SubstatusJSON
import SubstatusService
import SubstatusWire
import Synchronization

/// The fuzz targets of substatus: each takes arbitrary bytes, must never crash, and checks a
/// property that holds for every input (a decoded message re-encodes to bytes that decode to the
/// same message, a deframer gives the same messages however the bytes are split, ...).
///
/// The same functions run under libFuzzer (`Fuzz/Package.swift`, built by `scripts/fuzz` with
/// `-sanitize=fuzzer,address`) and, without sanitizers, over the checked-in corpora in
/// `Tests/SubstatusFuzzRegressionTests` (part of `make test`).
///
/// ```swift
/// if let violation = FuzzTarget.deframer.run(Array(data)) { fatalError(violation) }
/// ```
public enum FuzzTarget: String, CaseIterable, Sendable {
  /// The protobuf decoder of every message type (the first byte picks the type).
  case wire
  /// The proto3 JSON decoders of every message type (the first byte picks the type).
  case protojson
  /// `JSONValue(parsing:)`, the strict JSON parser.
  case json
  /// The parsers of Apple's formats: verifyReceipt, V1 notification, V2 payloads (first byte picks).
  case apple
  /// `GRPCDeframer`, fed in chunks whose sizes come from the input.
  case deframer
  /// The HTTP/1.1 notification endpoint through `SubstatusService.httpRouter()` over an in-memory store.
  case notification
  /// App Store signed data: compact JWS through `SignedDataVerifier`, or payloads and headers
  /// signed by a fixed test CA so that decoding past the signature check is reached (first byte picks).
  case signed
  /// V2 notifications (`{"signedPayload": JWS}`) through the HTTP endpoint of a service that trusts
  /// the fixed test CA, for an app with a bundle id and an Apple app id (first byte picks the shape).
  case notificationv2

  /// Runs one input; returns a description of the violated property, or `nil` when all held.
  /// A crash (trap, sanitizer report) is a finding too.
  public func run(_ input: [UInt8]) -> String? {
    switch self {
    case .wire: FuzzTargets.wire(input)
    case .protojson: FuzzTargets.protoJSON(input)
    case .json: FuzzTargets.json(input)
    case .apple: FuzzTargets.apple(input)
    case .deframer: FuzzTargets.deframer(input)
    case .notification: FuzzTargets.notification(input)
    case .signed: FuzzTargets.signed(input)
    case .notificationv2: FuzzTargets.notificationV2(input)
    }
  }
}

/// The app, path and shared secret the notification target posts to; seeds use this secret.
public enum NotificationFuzzSetup {
  /// The shared secret of the fuzzed app (seed bodies carry it as `password`).
  public static let sharedSecret = "fuzz-shared-secret-0123456789"
}

enum FuzzTargets {
  /// Every message type, in a stable order so that a corpus input keeps meaning the same type.
  static let messageTypes: [any ProtobufJSONMessage.Type] = ProtoFiles.messageTypes.keys.sorted()
    .map {
      ProtoFiles.messageTypes[$0]!
    }

  static func pickType(_ input: [UInt8]) -> (any ProtobufJSONMessage.Type, [UInt8])? {
    guard let first = input.first else { return nil }
    return (messageTypes[Int(first) % messageTypes.count], Array(input.dropFirst()))
  }

  // MARK: wire

  static func wire(_ input: [UInt8]) -> String? {
    guard let (type, body) = pickType(input) else { return nil }
    return wireRoundTrip(type, body)
  }

  static func wireRoundTrip<M: ProtobufJSONMessage>(_: M.Type, _ body: [UInt8]) -> String? {
    guard let message = try? M(serializedBytes: body) else { return nil }
    let encoded = message.serializedBytes()
    let again: M
    do { again = try M(serializedBytes: encoded) } catch {
      return "\(M.protoMessageName): re-encoded message does not decode: \(error)"
    }
    guard again.serializedBytes() == encoded else {
      return "\(M.protoMessageName): encoding is not stable across a round trip"
    }
    return jsonRoundTrip(message)
  }

  /// A message's proto3 JSON must read back, and print the same JSON again (a fixed point).
  static func jsonRoundTrip<M: ProtobufJSONMessage>(_ message: M) -> String? {
    let text = message.jsonString()
    guard (try? JSONValue(parsing: text)) != nil else {
      return "\(M.protoMessageName): jsonString() is not JSON: \(text.prefix(200))"
    }
    let back: M
    do { back = try M(jsonString: text) } catch {
      // Known and accepted: an Any whose type is unknown or whose bytes do not decode prints
      // {"@type": ..., "value": base64} (lossless, not canonical), which input refuses; a Duration
      // beyond proto3's range prints text that input refuses. See RELIABILITY.md.
      let reason = error.description
      if text.contains("\"@type\"") || reason.contains("google.protobuf.Duration") { return nil }
      return "\(M.protoMessageName): its own JSON \(text.prefix(200)) does not read back: \(error)"
    }
    guard back.jsonString() == text else {
      return
        "\(M.protoMessageName): JSON round trip changed the message: \(text.prefix(200)) vs \(back.jsonString().prefix(200))"
    }
    return nil
  }

  // MARK: proto3 JSON

  static func protoJSON(_ input: [UInt8]) -> String? {
    guard let (type, body) = pickType(input) else { return nil }
    return protoJSONDecode(type, body)
  }

  static func protoJSONDecode<M: ProtobufJSONMessage>(_: M.Type, _ body: [UInt8]) -> String? {
    guard let value = try? JSONValue(parsing: body), let message = try? M(jsonValue: value) else {
      return nil
    }
    // Whatever was accepted encodes, decodes back to itself, and prints JSON that reads back.
    let encoded = message.serializedBytes()
    guard let decoded = try? M(serializedBytes: encoded), decoded.serializedBytes() == encoded
    else {
      return
        "\(M.protoMessageName): a message read from JSON does not survive the binary round trip"
    }
    return jsonRoundTrip(message)
  }

  // MARK: JSON

  static func json(_ input: [UInt8]) -> String? {
    guard let value = try? JSONValue(parsing: input) else { return nil }
    let text = value.serializedBytes()
    let back: JSONValue
    do { back = try JSONValue(parsing: text) } catch {
      return
        "serialized JSON does not parse back: \(error): \(String(decoding: text.prefix(200), as: UTF8.self))"
    }
    guard back.serializedBytes() == text else {
      return "JSON serialization is not stable across a round trip"
    }
    return nil
  }

  // MARK: Apple's formats

  static func apple(_ input: [UInt8]) -> String? {
    guard let first = input.first else { return nil }
    let body = Array(input.dropFirst())
    switch first % 5 {
    case 0: _ = try? VerifyReceiptResponse(parsing: body)
    case 1: _ = try? NotificationV1(parsing: body)
    case 2: _ = try? NotificationV2(parsing: body)
    case 3: _ = try? Transaction(jwsTransactionPayload: body)
    default: _ = try? RenewalInfo(jwsRenewalInfoPayload: body)
    }
    return nil
  }

  // MARK: gRPC framing

  static func deframer(_ input: [UInt8]) -> String? {
    guard input.count >= 2 else { return nil }
    let limit = Int(input[0]) * 4  // 0 ... 1020 bytes
    let chunk = max(1, Int(input[1] & 0x1F))
    let stream = Array(input.dropFirst(2))
    let whole = deframe(stream, limit: limit, chunk: stream.count + 1)
    let pieces = deframe(stream, limit: limit, chunk: chunk)
    let bytewise = deframe(stream, limit: limit, chunk: 1)
    guard whole == pieces, whole == bytewise else {
      return "deframing depends on how the bytes are split: \(whole) vs \(pieces) vs \(bytewise)"
    }
    // The messages, framed again, are the stream up to where deframing stopped.
    var reframed: [UInt8] = []
    for message in whole.messages { GRPCFraming.appendFrame(message, to: &reframed) }
    guard stream.starts(with: reframed) else {
      return "reframing the messages does not give the input back"
    }
    return nil
  }

  struct Deframed: Equatable, CustomStringConvertible {
    var messages: [[UInt8]] = []
    var error: WireError?
    var leftover = 0
    var description: String {
      "\(messages.count) messages, error \(String(describing: error)), \(leftover) left"
    }
  }

  static func deframe(_ stream: [UInt8], limit: Int, chunk: Int) -> Deframed {
    var deframer = GRPCDeframer(maxMessageLength: limit)
    var result = Deframed()
    var offset = 0
    while offset < stream.count {
      let end = min(stream.count, offset + chunk)
      deframer.append(stream[offset..<end])
      offset = end
      do throws(WireError) {
        while let message = try deframer.next() { result.messages.append(message) }
      } catch {
        result.error = error
        return result
      }
    }
    result.leftover = deframer.bufferedByteCount
    do throws(WireError) { try deframer.finish() } catch {
      guard result.leftover > 0 else { return Deframed(error: error) }
    }
    return result
  }

  // MARK: HTTP notification endpoint

  static func notification(_ input: [UInt8]) -> String? {
    post(input, to: NotificationWorld.shared(.v1))
  }

  /// Posts a notification body; every answer but 200, 400, 401 and 404 is a violation (503 and 500
  /// come only from store failures, which an in-memory store does not have).
  static func post(_ body: [UInt8], to world: NotificationWorld) -> String? {
    let request = HTTPRequest(
      method: "POST", path: "/v1/apps/\(world.appID)/apple/notifications", body: body)
    let response = blocking { await world.router.respond(to: request) }
    switch response.status {
    case 200, 400, 401, 404: return nil
    default:
      return
        "notification answered \(response.status): \(String(decoding: response.body.prefix(300), as: UTF8.self))"
    }
  }
}

/// Runs async work to completion from synchronous code (libFuzzer calls in on its own thread).
func blocking<T: Sendable>(_ work: @escaping @Sendable () async -> T) -> T {
  let result = Mutex<T?>(nil)
  let done = DispatchSemaphore(value: 0)
  Task {
    let value = await work()
    result.withLock { $0 = value }
    done.signal()
  }
  done.wait()
  return result.withLock { $0! }
}

/// A service over an in-memory store with one tenant, one app and its shared secret, made once and
/// remade every few thousand inputs so that stored notifications do not pile up.
final class NotificationWorld: Sendable {
  /// Which service: `v1` trusts Apple's root only and its app has no Apple app id; `v2` trusts the
  /// fixed test CA of ``SignedDataFuzzSetup`` and its app has that Apple app id.
  enum Kind: Sendable { case v1, v2 }

  let router: HTTPRouter
  let appID: String
  let server: RPCServer

  private static let current = Mutex<[Kind: (world: NotificationWorld, uses: Int)]>([:])

  static func shared(_ kind: Kind) -> NotificationWorld {
    current.withLock { worlds in
      if let (world, uses) = worlds[kind], uses < 5_000 {
        worlds[kind] = (world, uses + 1)
        return world
      }
      worlds[kind]?.world.server.beginGracefulShutdown()
      let world = blocking { await NotificationWorld.make(kind) }
      worlds[kind] = (world, 1)
      return world
    }
  }

  private init(router: HTTPRouter, appID: String, server: RPCServer) {
    self.router = router
    self.appID = appID
    self.server = server
  }

  private static func make(_ kind: Kind) async -> NotificationWorld {
    let service = SubstatusService(
      store: InMemoryStore(), log: LogSink { _ in },
      appleRootCertificates: kind == .v2 ? [SignedDataFuzzSetup.root] : [.appleRootCAG3])
    var rpcRouter = RPCRouter()
    service.register(in: &rpcRouter)
    let transport = InProcessTransport()
    let server = RPCServer(
      transport: transport.server, router: rpcRouter, interceptors: service.interceptors())
    Task { try? await server.run() }
    let client = RPCClient(transport: transport.client)
    func call<Req: ProtobufMessage, Res: ProtobufMessage>(
      _ method: ProtoMethodDescriptor<Req, Res>, _ request: Req, key: String
    ) async -> Res {
      var metadata: Metadata = [:]
      metadata.addString("Bearer \(key)", forKey: "authorization")
      for _ in 0..<200 {
        do {
          return try await client.unary(
            method: method.path, request: request, response: Res.self, metadata: metadata)
        } catch  where error.code == .unavailable {
          try? await Task.sleep(for: .milliseconds(5))  // the server is not listening yet
        } catch {
          fatalError("fuzz setup: \(method.path) failed: \(error)")
        }
      }
      fatalError("fuzz setup: \(method.path) stayed unavailable")
    }
    guard let operatorKey = try? await service.bootstrapOperatorKey() else {
      fatalError("fuzz setup: no operator key")
    }
    var create = Substatus_V1_CreateTenantRequest()
    create.name = "fuzz"
    let tenant = await call(Substatus_V1_TenantService.createTenant, create, key: operatorKey)
    var register = Substatus_V1_RegisterAppRequest()
    register.bundleID = SignedDataFuzzSetup.bundleId
    if kind == .v2 { register.appleAppID = SignedDataFuzzSetup.appAppleId }
    let app = await call(Substatus_V1_AdminService.registerApp, register, key: tenant.adminKey)
    let appID = app.app?.appID ?? ""
    var products = Substatus_V1_PutProductsRequest()
    products.appID = appID
    var monthly = Substatus_V1_Product()
    monthly.productID = "premium.monthly"
    monthly.type = .autoRenewable
    monthly.subscriptionGroupID = "20001001"
    monthly.duration = "P1M"
    monthly.hasIntroductoryOffer = true
    products.products = [monthly]
    _ = await call(Substatus_V1_AdminService.putProducts, products, key: tenant.adminKey)
    var secret = Substatus_V1_SetSharedSecretRequest()
    secret.appID = appID
    secret.sharedSecret = NotificationFuzzSetup.sharedSecret
    _ = await call(Substatus_V1_AdminService.setSharedSecret, secret, key: tenant.adminKey)
    return NotificationWorld(router: service.httpRouter(), appID: appID, server: server)
  }
}
