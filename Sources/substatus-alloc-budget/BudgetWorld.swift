import Foundation
import HTTPServer
import RPCCore
import RPCInProcessTransport
import SubscriptionStorage
import SubscriptionStorageSQLite
import SubstatusClock
import SubstatusService
import SubstatusServiceAPI
import SubstatusWire
import Synchronization

/// A failure of the run: the fixture could not be set up, or a measured call did not give the
/// answer it must (a counted error path would be a different path).
struct BudgetError: Error, CustomStringConvertible {
  var description: String
  init(_ description: String) { self.description = description }
}

/// SplitMix64: the deterministic stream the fixture's ids and randomness come from.
struct SplitMix64: RandomNumberGenerator {
  var state: UInt64
  mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }
}

/// The service as `substatusd` wires it (the same ``SubstatusService``, its interceptors, the
/// health and reflection services on the router, a SQLite store with its default configuration
/// in a data directory), reached through the in-process transport instead of HTTP/2, and its
/// HTTP router called directly instead of through the HTTP/1.1 listener. Its clock is a
/// ``ManualClock`` that never moves, so that no cache entry or token bucket expires between two
/// counted windows, and its randomness is a fixed stream.
final class BudgetWorld: Sendable {
  /// The instant the histories are built around, and the service's "now".
  static let nowMs: Int64 = 1_767_225_600_000  // 2026-01-01T00:00:00Z
  static let dayMs: Int64 = 86_400_000
  static let bundleID = "com.example.budget"
  static let sharedSecret = "0123456789abcdef0123456789abcdef"

  let directory: URL
  let store: SQLiteStore
  let service: SubstatusService
  let server: RPCServer
  /// The client end of the in-process transport (the measured calls pass it encoded bytes).
  let transport: InProcessTransport.Client
  /// A typed client over it (the fixture's setup).
  let rpc: RPCClient
  let notifications: HTTPRouter

  init() throws {
    directory = FileManager.default.temporaryDirectory.appendingPathComponent(
      "substatus-alloc-budget-\(getpid())-\(UInt64.random(in: 0...UInt64.max))")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    let keyring = try MasterKeyring.loadOrCreate(file: directory.appendingPathComponent("master.key").path)
    store = try SQLiteStore(configuration: .dataDirectory(directory.path, keyring: keyring))
    let clock = ManualClock(wallMs: Self.nowMs)
    let random = RandomStream()
    // The daemon's buffered standard-error log: the access log's line per call is part of the path.
    service = SubstatusService(
      store: store, environment: ServiceEnvironment(clock: clock, wireClock: clock, randomBytes: random.bytes),
      log: LogSink.standardError.with(clock: clock))
    var router = RPCRouter()
    service.register(in: &router)
    HealthService().register(into: &router)
    ReflectionService(files: ProtoFiles.all).register(into: &router)
    let transport = InProcessTransport()
    server = RPCServer(transport: transport.server, router: router, interceptors: service.interceptors())
    self.transport = transport.client
    rpc = RPCClient(transport: transport.client)
    notifications = service.httpRouter()
  }

  /// Runs `body` while the server serves, then drains it, closes the store and removes the
  /// data directory.
  func serving<T: Sendable>(_ body: @Sendable () async throws -> T) async throws -> T {
    defer {
      store.close()
      try? FileManager.default.removeItem(at: directory)
    }
    return try await withThrowingTaskGroup(of: T?.self) { group in
      group.addTask {
        try await self.server.run()
        return nil
      }
      let result: T
      do { result = try await body() } catch {
        server.beginGracefulShutdown()
        throw error
      }
      server.beginGracefulShutdown()
      try await group.waitForAll()
      return result
    }
  }

  /// The metadata of a call made with `key`.
  static func bearer(_ key: String) -> Metadata {
    var metadata: Metadata = [:]
    metadata.addString("Bearer \(key)", forKey: "authorization")
    return metadata
  }

  /// Calls `method` with `metadata` (``bearer(_:)``): the fixture's setup.
  func call<Request: ProtobufMessage, Response: ProtobufMessage>(
    _ method: ProtoMethodDescriptor<Request, Response>, _ request: Request, _ metadata: Metadata
  ) async throws -> Response {
    try await rpc.unary(method: method.path, request: request, response: Response.self, metadata: metadata)
  }
}

/// The service's random bytes: a fixed stream, so that every run makes the same keys and ids.
final class RandomStream: Sendable {
  private let generator = Mutex(SplitMix64(state: 0x5EED))

  var bytes: @Sendable (Int) -> [UInt8] {
    { n in
      self.generator.withLock { rng in
        var out = [UInt8]()
        out.reserveCapacity(n)
        while out.count < n {
          var word = rng.next()
          for _ in 0..<min(8, n - out.count) {
            out.append(UInt8(truncatingIfNeeded: word))
            word >>= 8
          }
        }
        return out
      }
    }
  }
}
