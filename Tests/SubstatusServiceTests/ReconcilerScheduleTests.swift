import AppStoreSignedData
import Foundation
import SubscriptionStorage
import SubscriptionStorageTesting
import SubstatusClock
import Testing

@testable import SubstatusService

/// A reconciler over an in-memory store holding one app with an In-App Purchase key, whose App
/// Store Server API is a ``CountingUpstream`` answering an empty notification history.
private struct ReconcilerWorld {
  let world: TestWorld
  let apple = CountingUpstream(status: 200, body: #"{"notificationHistory":[],"hasMore":false}"#)
  let service: SubstatusService

  init(separateWireClock: Bool = false) async throws {
    world = TestWorld(separateWireClock: separateWireClock)
    let store = InMemoryStore()
    service = SubstatusService(
      store: store, environment: world.environment, log: world.log,
      appStoreServerAPI: AppStoreServerAPIClient(
        productionURL: URL(string: "http://apple.invalid")!, sandboxURL: URL(string: "http://apple.invalid/sandbox")!,
        maxAttempts: 1, requester: apple, clock: world.clock))
    try await store.createTenant(TenantRecord(tenantId: "t1", name: "t1", createdMs: 0))
    try await store.createApp(AppRecord(appId: "app1", tenantId: "t1", bundleId: "com.example.app", createdMs: 0))
    let key = ES256PrivateKey.generate()
    try await store.setInAppPurchaseKey(
      appId: "app1",
      key: InAppPurchaseKey(
        keyId: "ABCDEFGHIJ", issuerId: "57246542-96fe-1a63-e053-0824d011072a", privateKeyPEM: key.pkcs8PEM,
        publicKeyPEM: key.publicKey.pem, publicKeyFingerprint: "sha256:test", setMs: 0))
  }

  /// The value of an unlabelled counter in `/metrics`.
  func counter(_ name: String) -> String? {
    service.metrics.prometheusText().split(separator: "\n").first { $0.hasPrefix(name + " ") }
      .map { String($0.dropFirst(name.count + 1)) }
  }
}

@Suite("Server API reconciler schedule and metrics")
struct ReconcilerScheduleTests {
  @Test("run() reconciles at once, then every interval of the clock, and stops at once", .timeLimit(.minutes(1)))
  func runsEveryIntervalAndStops() async throws {
    let w = try await ReconcilerWorld()
    let clock = w.world.clock
    let reconciler = ServerAPIReconciler(service: w.service, configuration: .init(interval: .seconds(3600)))
    let task = Task { await reconciler.run() }
    // The first pass: Get Notification History in both environments, then the wait.
    #expect(await clock.waitForSleepers(1))
    #expect(w.apple.requests == 2)
    #expect(w.counter("substatus_reconciler_runs_total") == "1")
    // Not a moment before the interval.
    clock.advance(by: .seconds(3599))
    #expect(clock.sleeperCount == 1)
    #expect(w.apple.requests == 2)
    clock.advance(by: .seconds(1))
    #expect(await clock.waitForSleepers(1))
    #expect(w.apple.requests == 4)
    #expect(w.counter("substatus_reconciler_runs_total") == "2")
    // A pass where Apple fails counts one failure per app and environment; the schedule goes on.
    w.apple.status.withLock { $0 = 503 }
    clock.advance(by: .seconds(3600))
    #expect(await clock.waitForSleepers(1))
    #expect(w.apple.requests == 6)
    #expect(w.counter("substatus_reconciler_runs_total") == "3")
    #expect(w.counter("substatus_reconciler_failures_total") == "2")
    #expect(w.counter("substatus_reconciler_notifications_total") == "0")
    #expect(w.counter("substatus_reconciler_users_synced_total") == "0")
    // Stopping ends the wait at once: no time passes on the clock, no further pass.
    reconciler.beginGracefulShutdown()
    await task.value
    #expect(clock.sleeperCount == 0)
    #expect(w.counter("substatus_reconciler_runs_total") == "3")
    #expect(w.apple.requests == 6)
  }

  /// Under `--clock-url` the service clock follows the simulator's, which may stand still: the
  /// interval between runs is real time (the wire clock), or no run would ever come again.
  @Test("run() waits its interval on the wire clock, not on a service clock standing still", .timeLimit(.minutes(1)))
  func waitsOnTheWireClock() async throws {
    let w = try await ReconcilerWorld(separateWireClock: true)
    let (service, wire) = (w.world.clock, w.world.wireClock)
    let reconciler = ServerAPIReconciler(service: w.service, configuration: .init(interval: .seconds(3600)))
    let task = Task { await reconciler.run() }
    #expect(await wire.waitForSleepers(1))
    #expect(service.sleeperCount == 0)
    #expect(w.apple.requests == 2)
    // The service's time moving does not bring the next run; an hour of real time does.
    service.advance(by: .seconds(7200))
    #expect(w.apple.requests == 2)
    wire.advance(by: .seconds(3600))
    #expect(await wire.waitForSleepers(1))
    #expect(w.apple.requests == 4)
    #expect(w.counter("substatus_reconciler_runs_total") == "2")
    reconciler.beginGracefulShutdown()
    await task.value
    #expect(wire.sleeperCount == 0)
  }

  @Test("cancelling run() ends its wait at once", .timeLimit(.minutes(1)))
  func cancellationStops() async throws {
    let w = try await ReconcilerWorld()
    let task = Task { await ServerAPIReconciler(service: w.service).run() }
    #expect(await w.world.clock.waitForSleepers(1))
    task.cancel()
    await task.value
    #expect(w.world.clock.sleeperCount == 0)
    #expect(w.counter("substatus_reconciler_runs_total") == "1")
  }
}
