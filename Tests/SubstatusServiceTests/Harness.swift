import AppStoreSignedData
import Foundation
import Synchronization
import Testing
import RPCCore
import RPCInProcessTransport
import SubscriptionDomain
import SubscriptionStorage
import SubscriptionStorageTesting
import SubstatusClock
import SubstatusWire
@testable import SubstatusService

/// The wall time of a ``TestWorld`` in ms, read and moved like a `Mutex<Int64>`
/// (`now.withLock { $0 += 60_000 }`): a change moves the world's ``ManualClock`` forward by as much
/// (it never goes back).
final class TestWallTime: Sendable {
  let clock: ManualClock

  init(_ clock: ManualClock) { self.clock = clock }

  /// Passes the wall time to `body`; what `body` adds to it advances the clock.
  @discardableResult
  func withLock<T>(_ body: (inout Int64) throws -> T) rethrows -> T {
    let before = clock.wallMs
    var now = before
    let result = try body(&now)
    if now < before { Issue.record("the test clock does not go back (\(before) -> \(now))") }
    if now > before { clock.advance(by: .milliseconds(now - before)) }
    return result
  }
}

/// A manual clock, fixed randomness and a log that keeps every line.
final class TestWorld: Sendable {
  let clock: ManualClock
  /// The environment's wire clock (outgoing requests' timeouts): ``clock`` unless the world was
  /// made with one of its own.
  let wireClock: ManualClock
  /// The clock's wall time, from 2024-03-25T00:00:00Z by default.
  let now: TestWallTime
  let lines = Mutex<[String]>([])
  let counter = Mutex<UInt64>(0)

  init(wallMs: Int64 = 1_711_324_800_000, separateWireClock: Bool = false) {
    clock = ManualClock(wallMs: wallMs)
    wireClock = separateWireClock ? ManualClock(wallMs: wallMs) : clock
    now = TestWallTime(clock)
  }

  var environment: ServiceEnvironment {
    ServiceEnvironment(
      clock: clock, wireClock: wireClock,
      randomBytes: { n in
        // Deterministic but distinct bytes per call.
        let seed = self.counter.withLock { $0 += 1; return $0 }
        return (0..<n).map { UInt8(truncatingIfNeeded: (seed &* 0x9E37_79B9_7F4A_7C15) >> (UInt64($0 % 8) * 8) &+ UInt64($0)) }
      })
  }

  var log: LogSink { LogSink({ line in self.lines.withLock { $0.append(line) } }, clock: clock) }
}

/// A service over an in-memory store, reachable through an in-process transport.
struct Harness {
  let world: TestWorld
  let service: SubstatusService
  let client: RPCClient
  let operatorKey: String

  func call<Req: ProtobufMessage, Res: ProtobufMessage>(
    _ method: ProtoMethodDescriptor<Req, Res>, _ request: Req, key: String?
  ) async throws -> Res {
    var metadata: Metadata = [:]
    if let key { metadata.addString("Bearer \(key)", forKey: "authorization") }
    return try await client.unary(method: method.path, request: request, response: Res.self, metadata: metadata)
  }

  /// A tenant with an app, its secret and catalog; returns (admin key, app id).
  func makeTenantWithApp(name: String = "acme", bundleID: String = "com.example.app", appleAppID: Int64 = 0) async throws -> (String, String) {
    var create = Substatus_V1_CreateTenantRequest()
    create.name = name
    let tenant = try await call(Substatus_V1_TenantService.createTenant, create, key: operatorKey)
    var register = Substatus_V1_RegisterAppRequest()
    register.bundleID = bundleID
    register.displayName = "Example"
    register.appleAppID = appleAppID
    let app = try await call(Substatus_V1_AdminService.registerApp, register, key: tenant.adminKey)
    var put = try Substatus_V1_PutProductsRequest(jsonString: try fixture("catalog.json"))
    put.appID = app.app!.appID
    _ = try await call(Substatus_V1_AdminService.putProducts, put, key: tenant.adminKey)
    return (tenant.adminKey, app.app!.appID)
  }
}

func fixture(_ name: String) throws -> String {
  let url = try #require(Bundle.module.url(forResource: "Fixtures/\(name)", withExtension: nil))
  return try String(contentsOf: url, encoding: .utf8)
}

/// Runs `body` against a service in `world` over `store`; with `operatorKey`, a second instance
/// over a store another harness bootstrapped (its key is reused).
func withService(
  limits: ServiceLimits = ServiceLimits(), verifyReceipt: VerifyReceiptClient = VerifyReceiptClient(),
  appleRootCertificates: [X509Certificate] = [X509Certificate.appleRootCAG3], store: any Store = InMemoryStore(),
  world: TestWorld = TestWorld(), operatorKey bootstrapped: String? = nil,
  _ body: (Harness) async throws -> Void
) async throws {
  let service = SubstatusService(
    store: store, environment: world.environment, limits: limits, verifyReceipt: verifyReceipt, log: world.log,
    appleRootCertificates: appleRootCertificates)
  let operatorKey: String
  if let bootstrapped {
    operatorKey = bootstrapped
  } else {
    operatorKey = try #require(try await service.bootstrapOperatorKey())
  }
  #expect(try await service.bootstrapOperatorKey() == nil)
  var router = RPCRouter()
  service.register(in: &router)
  let transport = InProcessTransport()
  let server = RPCServer(transport: transport.server, router: router, interceptors: service.interceptors())
  try await withThrowingTaskGroup(of: Void.self) { group in
    group.addTask { try await server.run() }  // calls made before it listens wait for it
    let harness = Harness(world: world, service: service, client: RPCClient(transport: transport.client), operatorKey: operatorKey)
    do {
      try await body(harness)
    } catch {
      server.beginGracefulShutdown()  // otherwise the group would wait for the server forever
      throw error
    }
    server.beginGracefulShutdown()
    try await group.waitForAll()
  }
}

/// Expects an RPC to fail with a status; returns the error.
@discardableResult
func expectStatus(_ code: RPCError.Code, _ what: String = "", _ call: () async throws -> Void) async -> RPCError? {
  do {
    try await call()
    Issue.record("\(what): expected \(code), got OK")
  } catch let error as RPCError {
    #expect(error.code == code, "\(what): \(error)")
    return error
  } catch {
    Issue.record("\(what): expected RPCError, got \(error)")
  }
  return nil
}
