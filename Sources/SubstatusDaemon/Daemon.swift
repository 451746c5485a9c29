import AppStoreSignedData
import CLinuxShims
import Dispatch
import Foundation
import Glibc
import HTTPServer
import OutboundHTTP
import ProcessSignals
import RPCCore
import RPCHTTP2Transport
import RPCWebGateway
import ServiceLifecycle
import SubstatusConsole
import SubscriptionStorage
import SubscriptionStoragePostgres
import SubscriptionStorageSQLite
import SubstatusClock
import SubstatusJSON
import SubstatusMetrics
import SubstatusService
import SubstatusServiceAPI
import SubstatusWire
import Synchronization

/// substatusd: opens the store, serves gRPC and HTTP, drains gracefully on SIGTERM/SIGINT.
public enum SubstatusDaemon {
  /// Runs the daemon until a termination signal has drained it.
  /// - Parameter clock: the clock of the service, its schedules, retries and logs (with
  ///   `--clock-url`, the service's schedules and retries follow that clock instead).
  /// - Returns: the process exit status.
  public static func run(
    _ configuration: DaemonConfiguration, environment: [String: String], clock: any ServiceClock = SystemClock()
  ) async -> Int32 {
    let log = LogSink.standardError.with(clock: clock)
    do throws(StartFailure) {
      return try await wire(configuration, environment: environment, clock: clock, log: log)
    } catch {
      log.write(.object(["level": .string("error"), "msg": .string(error.message)]))
      log.flush()
      return error.status
    }
  }

  /// The wiring: each component from its factory (`DaemonComponents.swift`), in dependency order;
  /// then the `ServiceGroup` runs them until a termination signal has drained it.
  private static func wire(
    _ configuration: DaemonConfiguration, environment: [String: String], clock: any ServiceClock, log: LogSink
  ) async throws(StartFailure) -> Int32 {
    // Memory: glibc malloc gives a thread that finds its arena locked a new one (up to 8 per core)
    // and keeps freed memory in the arena that served it; one arena per core keeps that spread
    // down (`docs/evaluation-cache.md`, "Memory"). MALLOC_ARENA_MAX in the environment wins.
    _ = clinux_limit_malloc_arenas(Int32(max(2, ProcessInfo.processInfo.activeProcessorCount)))
    // Descriptors: raise the soft limit to the hard one, then keep both listeners' caps and a
    // reserve under it, so that no client load brings the process near its limit.
    let openFilesLimit = Int(clinux_raise_open_files_limit())
    let descriptors = DescriptorBudget(openFilesLimit: openFilesLimit, configuration: configuration)
    if openFilesLimit > 0, !descriptors.fits(openFilesLimit: openFilesLimit, reserved: configuration.reservedDescriptors) {
      log.write(.object([
        "level": .string("warning"),
        "msg": .string("the connection caps and the descriptor reserve exceed the open-files limit: raise the limit or lower the caps"),
        "open_files_limit": .integer(Int64(openFilesLimit)),
      ]))
    }
    let outbound = OutboundClients(configuration, log: log)
    let applePoster = OutboundHTTPPoster.apple(client: outbound.apple)
    let lock = try dataDirectoryLock(configuration)
    defer { withExtendedLifetime(lock) {} }
    let keyring = try masterKeyring(configuration, environment: environment)
    let opened = try openStore(configuration, keyring: keyring)
    defer { opened.close() }
    let verifyReceipt = try verifyReceiptClient(configuration, poster: applePoster, clock: clock)
    let appleRoots = try appleRootCertificates(configuration, log: log)
    let serverAPIURLs = try appStoreServerAPIURLs(configuration)
    let followed = try await followedClock(configuration, requester: applePoster, log: log)
    defer { followed?.stop() }

    // The service; webhooks: the dispatcher delivers the event log to them.
    let serviceEnvironment = ServiceEnvironment(
      clock: followed ?? clock, wireClock: clock, randomBytes: SecureRandom.bytes)
    let eventMetrics = EventMetrics()
    // Event cursors under the master key: every instance reads the others' (opaque per app).
    let eventCursors = EventCursors(keyring: keyring)
    let dispatcher = webhookDispatcher(
      configuration, store: opened.store, environment: serviceEnvironment, client: outbound.webhooks, log: log,
      eventMetrics: eventMetrics, cursors: eventCursors)
    let service = SubstatusService(
      store: opened.store, environment: serviceEnvironment, limits: serviceLimits(configuration),
      verifyReceipt: verifyReceipt, log: log, appleRootCertificates: appleRoots,
      appStoreServerAPI: AppStoreServerAPIClient(
        productionURL: serverAPIURLs.production, sandboxURL: serverAPIURLs.sandbox, requester: applePoster,
        clock: clock, appleClock: followed ?? clock),
      eventMetrics: eventMetrics, webhookDispatcher: dispatcher, eventCursors: eventCursors)
    try await bootstrapOperatorKey(configuration, service: service, log: log)

    // gRPC.
    guard let grpcAddress = HostPort(configuration.grpcListen), let httpAddress = HostPort(configuration.httpListen) else {
      throw StartFailure(message: "invalid listen address", status: 2)
    }
    let health = HealthService()
    let router = rpcRouter(service, health: health)
    let transport = try grpcTransport(configuration, address: grpcAddress, descriptors: descriptors, clock: clock)
    let server = RPCServer(transport: transport, router: router, interceptors: service.interceptors())
    service.metrics.addSource { transport.metrics.metricFamilies() }
    if let storeMetrics = opened.metrics { service.metrics.addSource(storeMetrics) }
    service.metrics.addSource { outbound.metricFamilies() }

    // HTTP.
    let draining = Atomic<Bool>(false)
    // The HTTP server is created below; /metrics reads its counters through this box.
    let httpMetrics = Mutex<HTTPServer?>(nil)
    let memory = MemoryReturn(interval: configuration.memoryTrimInterval)
    service.metrics.addSource { (httpMetrics.withLock { $0 }?.metricFamilies() ?? []) + memory.metricFamilies() }
    var httpRouter = service.httpRouter(isDraining: { draining.load(ordering: .relaxed) })
    // The web console (/console): static files from the binary, Chart.js from libjs-chart.js.
    WebConsole().register(in: &httpRouter)
    // Connect and gRPC-Web on the HTTP listener, below the listener's own routes (notifications,
    // health, metrics keep precedence).
    let gateway = webGateway(configuration, router: router, service: service, clock: clock)
    httpRouter.fallback = { request in await gateway.respond(to: request) }
    let http: HTTPServer
    do {
      http = try httpServer(
        configuration, address: httpAddress, router: httpRouter, gateway: gateway, descriptors: descriptors,
        clock: clock, log: log)
    } catch {
      server.beginGracefulShutdown()
      throw error
    }
    httpMetrics.withLock { $0 = http }

    // SIGHUP: reload the TLS certificate and key; a broken pair keeps the current one.
    let grpcTLS = configuration.tlsCertificate != nil && configuration.tlsKey != nil
    if grpcTLS {
      ProcessSignals.on([SIGHUP]) {
        do {
          try transport.reloadTLSCertificates()
          log.info("reloaded the TLS certificate")
        } catch {
          log.write(.object(["level": .string("error"), "msg": .string("TLS reload failed, keeping the current certificate: \(error)")]))
        }
      }
    }
    let grpcBound = "\(bracketed(grpcAddress.host)):\(transport.port)"
    let httpBound = "\(bracketed(httpAddress.host)):\(http.port)"

    // The lifecycle (docs/architecture.md, "Background jobs"): the store is open; the background
    // services start, then the listeners. On SIGTERM or SIGINT the listeners stop accepting and
    // drain their calls in flight, then the background services stop, each within a bound on the
    // real clock (work that does not end in time is cancelled, then left behind: logged, exit
    // status 1); the store closes last (the `defer` above).
    let group = ServiceGroup(
      background: backgroundServices(
        configuration, service: service, dispatcher: dispatcher, clock: clock,
        callsInFlight: { max(0, transport.metrics.callsInFlight - service.eventMetrics.openWatchers) })
        + [memoryReturnService(memory, transport: transport, http: http)]
        + (followed.map { [followedClockService($0)] } ?? []),
      listeners: [
        .init("the gRPC listener", server, stopWithin: .seconds(30)),
        .init("the HTTP listener", ClosureService(stop: { await http.stop() }), stopWithin: .seconds(10)),
      ],
      clock: clock,
      onShutdown: {
        service.eventSignal.close()  // WatchEvents streams end UNAVAILABLE; clients resume by cursor
        draining.store(true, ordering: .relaxed)
        health.markAllNotServing()
        log.info("draining: finishing in-flight calls")
      })
    ProcessSignals.on([SIGTERM, SIGINT]) { group.beginGracefulShutdown() }
    let outcome = await group.run(started: {
      log.info("listening", [
        ("grpc", .string(grpcBound)), ("http", .string(httpBound)), ("data_dir", .string(configuration.dataDirectory)),
        ("grpc_tls", .bool(grpcTLS)),
        ("open_files_limit", .integer(Int64(openFilesLimit))),
        ("grpc_max_connections", .integer(Int64(descriptors.grpcConnections))),
        ("http_max_connections", .integer(Int64(descriptors.httpConnections))),
      ])
      if let readyFile = configuration.readyFile {
        let ready: JSONObject = ["grpc": .string(grpcBound), "http": .string(httpBound)]
        do { try writeAtomically(readyFile, JSONValue.object(ready).serialized() + "\n") } catch {
          log.write(.object(["level": .string("error"), "msg": .string("cannot write the ready file: \(error.localizedDescription)")]))
        }
      }
    })
    for failure in outcome.failures {
      log.write(.object(["level": .string("error"), "msg": .string("failed: \(failure)")]))
    }
    if !outcome.unfinished.isEmpty {
      log.write(.object([
        "level": .string("error"), "msg": .string("stopped, leaving behind work that did not end in time"),
        "unfinished": .array(outcome.unfinished.map { .string($0) }),
      ]))
      log.flush()
      return 1
    }
    log.info("stopped")
    log.flush()
    return outcome.failures.isEmpty ? 0 : 1
  }

  /// The background services, in starting order: the transition scheduler, the webhook
  /// dispatcher, the watcher poll, the reconciler and the receipt refresher (the last two off with
  /// an interval of 0); stopped in the reverse order.
  static func backgroundServices(
    _ configuration: DaemonConfiguration, service: SubstatusService, dispatcher: WebhookDispatcher?,
    clock: any ServiceClock, callsInFlight: @escaping @Sendable () -> Int
  ) -> [ServiceGroup.Member] {
    var members: [ServiceGroup.Member] = []
    // Events out: the changes by time alone (the scheduler wakes on its own: at due times on the
    // service clock, a periodic pass on the real clock); its pass in progress finishes. A catch-up
    // pauses between batches only while calls wait (`callsInFlight`: open WatchEvents streams do not count).
    members.append(.init(
      "the transition scheduler", EventTransitionScheduler(service: service, callsInFlight: callsInFlight),
      stopWithin: .seconds(10)))
    // POSTs in flight finish (at most the dispatcher's timeout); claimed deliveries not started
    // are due again after their lease.
    if let dispatcher {
      members.append(.init("the webhook dispatcher", dispatcher, stopWithin: dispatcher.configuration.timeout + .seconds(5)))
    }
    // Refund requests (rule 27): an answer in flight finishes (bounded by the Server API client's
    // timeout and retries); a claimed request not answered is due again after its lease.
    members.append(.init("the consumption responder", ConsumptionResponder(service: service), stopWithin: .seconds(60)))
    // Set App Account Token after purchase sharing transfers (rule 26): a write in flight finishes
    // (bounded by the Server API client's timeout and retries); a claimed write not sent is due
    // again after its lease.
    members.append(.init("the app account token writer", AppAccountTokenWriter(service: service), stopWithin: .seconds(60)))
    // Kept notifications older than --keep-notifications-days (0: kept for ever); a batch in
    // progress finishes.
    if configuration.keepNotificationsDays > 0 {
      let pruner = KeptNotificationPruner(
        store: service.store, clock: service.environment.clock, log: service.log,
        configuration: .init(keepDays: configuration.keepNotificationsDays))
      service.metrics.registry.register(pruner)
      members.append(.init("the kept notification pruner", pruner, stopWithin: .seconds(10)))
    }
    // A look at the log every second for the watchers (events other instances sharing a
    // PostgreSQL database wrote).
    members.append(.init("the watcher poll", EventSignalPoll(service: service, clock: clock), stopWithin: .seconds(2)))
    // Refreshes and reconciliations in flight may finish for 5 s, then they are cancelled (and
    // retried after restart).
    if configuration.reconcileInterval > 0 {
      members.append(.init("the reconciler", ServerAPIReconciler(service: service, configuration: .init(
        interval: .milliseconds(max(10, Int64(configuration.reconcileInterval * 1000))))), stopWithin: .seconds(5)))
    }
    if configuration.refreshInterval > 0 {
      members.append(.init("the receipt refresher", ReceiptRefresher(service: service, configuration: .init(
        interval: .milliseconds(max(10, Int64(configuration.refreshInterval * 1000))),
        maxConcurrent: configuration.refreshConcurrency, maxConcurrentPerTenant: configuration.refreshTenantConcurrency,
        batchSize: configuration.refreshBatchSize, lease: .milliseconds(Int64(configuration.refreshLease * 1000)))),
        stopWithin: .seconds(5)))
    }
    return members
  }

  static func bracketed(_ host: String) -> String { host.contains(":") ? "[\(host)]" : host }

  /// Writes a file readable only by its owner.
  static func writeSecretFile(_ path: String, _ text: String) throws {
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
    defer { close(fd) }
    _ = fchmod(fd, 0o600)
    let bytes = Array(text.utf8)
    guard write(fd, bytes, bytes.count) == bytes.count, fsync(fd) == 0 else {
      throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
    }
  }

  /// Writes a file so that readers see either nothing or all of it.
  static func writeAtomically(_ path: String, _ text: String) throws {
    let temporary = path + ".tmp-\(getpid())"
    try Data(text.utf8).write(to: URL(fileURLWithPath: temporary))
    guard rename(temporary, path) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
  }
}


/// Logs the HTTP listener's refusals (over a client cap, bad framing), naming the client: at most
/// one line per reason a second, with the number of refusals of that reason since the last line.
final class RefusalLog: Sendable {
  private let log: LogSink
  private let state = Mutex<[String: (last: ContinuousClock.Instant, suppressed: Int)]>([:])

  init(log: LogSink) { self.log = log }

  func record(_ refusal: HTTPRefusal) {
    let now = ContinuousClock.now
    let suppressed = state.withLock { state -> Int? in
      if let entry = state[refusal.reason], now - entry.last < .seconds(1) {
        state[refusal.reason]?.suppressed += 1
        return nil
      }
      defer { state[refusal.reason] = (now, 0) }
      return state[refusal.reason]?.suppressed ?? 0
    }
    guard let suppressed else { return }
    log.info("http request refused", [
      ("reason", .string(refusal.reason)), ("client", .string(refusal.client)), ("status", .integer(Int64(refusal.status))),
      ("method", .string(String(refusal.method.prefix(16)))), ("path", .string(String(refusal.path.prefix(128)))),
      ("refused_since_last_line", .integer(Int64(suppressed))),
    ])
  }
}

// The lifecycle's services (`ServiceLifecycle`): each of these already runs until told to stop.
extension RPCServer: Service {}
extension EventTransitionScheduler: Service {}
extension WebhookDispatcher: Service {}
extension ServerAPIReconciler: Service {}
extension ReceiptRefresher: Service {}
extension ConsumptionResponder: Service {}
extension AppAccountTokenWriter: Service {}
extension KeptNotificationPruner: Service {}

/// The watcher poll: signals the service's `EventSignal` every second of `clock`, so that
/// `WatchEvents` sees events other instances sharing a PostgreSQL database wrote.
struct EventSignalPoll: Service {
  let service: SubstatusService
  let clock: any ServiceClock
  private let stopping = ShutdownSignal()

  init(service: SubstatusService, clock: any ServiceClock) {
    self.service = service
    self.clock = clock
  }

  func run() async {
    await withTaskGroup(of: Void.self) { group in
      group.addTask { [stopping] in await stopping.wait() }
      group.addTask { [service, clock] in
        while !Task.isCancelled {
          do { try await clock.sleep(for: .seconds(1)) } catch { return }
          service.eventSignal.signal()
        }
      }
      await group.next()
      group.cancelAll()
    }
  }

  func beginGracefulShutdown() { stopping.fire() }
}

/// Why a service's stop failed.
enum DaemonStopError: Error {
  /// Work it was waiting for did not end in time.
  case leftBehind
}
