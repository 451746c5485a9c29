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
    func fail(_ message: String, status: Int32 = 1) -> Int32 {
      log.write(.object(["level": .string("error"), "msg": .string(message)]))
      log.flush()
      return status
    }
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
    // Outbound HTTP (libcurl, README "Limits"): one pool for webhooks, whose every address is
    // checked by the webhook rules as it is connected to, one for Apple's endpoints and the test
    // clock (the operator's URLs; a connection of one pool is never reused by the other). Together
    // at most --outbound-max-connections, counted in the descriptor reserve.
    let outboundCap = configuration.outboundConnections
    if outboundCap + 32 > configuration.reservedDescriptors {
      log.write(.object([
        "level": .string("warning"),
        "msg": .string("--outbound-max-connections leaves less than 32 of --reserved-descriptors for the store and the runtime"),
        "outbound_max_connections": .integer(Int64(outboundCap)),
      ]))
    }
    let appleConnections = max(1, outboundCap / 4)
    let webhookClient = OutboundHTTPClient(
      configuration: .init(
        maxConnections: max(1, outboundCap - appleConnections), maxConnectionsPerHost: 16,
        caFile: configuration.outboundCAFile))
    let appleClient = OutboundHTTPClient(
      configuration: .init(
        maxConnections: appleConnections, maxConnectionsPerHost: appleConnections, caFile: configuration.outboundCAFile))
    let applePoster = OutboundHTTPPoster.apple(client: appleClient)
    let postgresURL = configuration.store == "sqlite" ? nil : configuration.store
    do {
      try FileManager.default.createDirectory(
        atPath: configuration.dataDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    } catch {
      return fail("cannot create data directory \(configuration.dataDirectory): \(error.localizedDescription)")
    }
    // One substatusd per SQLite store (a PostgreSQL store is shared by design).
    let dataDirectoryLock: DataDirectoryLock?
    do throws(DataDirectoryLock.Failure) {
      dataDirectoryLock = postgresURL == nil ? try DataDirectoryLock(directory: configuration.dataDirectory) : nil
    } catch {
      if case .held = error { return fail("\(error)", status: DataDirectoryLock.busyExitStatus) }
      return fail("\(error)")
    }
    defer { withExtendedLifetime(dataDirectoryLock) {} }

    // Secrets at rest: the master key from a file, the environment, or one created on first start.
    let keyring: MasterKeyring
    do {
      if let file = configuration.masterKeyFile {
        keyring = try MasterKeyring.load(file: file)
      } else if let fromEnvironment = try MasterKeyring.load(environment: environment) {
        keyring = fromEnvironment
      } else if postgresURL != nil {
        // Several instances share the database: a key made up by one would lock the others out.
        return fail(
          "with --store postgres:// every instance needs the same master key: set --master-key-file, \(MasterKeyring.fileEnvironmentVariable) or \(MasterKeyring.environmentVariable)",
          status: 2)
      } else {
        keyring = try MasterKeyring.loadOrCreate(file: configuration.dataDirectory + "/master.key")
      }
    } catch {
      return fail("master key: \(error)")
    }

    let store: any Store
    let closeStore: () -> Void
    var storeMetrics: (@Sendable () -> String)?
    do {
      if let postgresURL {
        let postgres = try PostgresStore(
          configuration: .init(
            url: postgresURL, keyring: keyring, poolSize: configuration.postgresPoolSize,
            historyCacheBytes: configuration.historyCacheMB << 20))
        (store, closeStore) = (postgres, postgres.close)
        storeMetrics = { postgres.historyCacheMetrics() }
      } else {
        var sqliteConfiguration = SQLiteStore.Configuration.dataDirectory(configuration.dataDirectory, keyring: keyring)
        sqliteConfiguration.historyCacheBytes = configuration.historyCacheMB << 20
        let sqlite = try SQLiteStore(configuration: sqliteConfiguration)
        (store, closeStore) = (sqlite, sqlite.close)
        storeMetrics = { sqlite.historyCacheMetrics() + sqlite.memoryMetrics() }
      }
    } catch {
      return fail("cannot open the store: \(error)")
    }
    defer { closeStore() }

    guard let productionURL = URL(string: configuration.verifyReceiptProductionURL),
      let sandboxURL = URL(string: configuration.verifyReceiptSandboxURL)
    else { return fail("invalid verifyReceipt URL", status: 2) }
    // The roots App Store signed data must chain to: Apple Root CA - G3 unless configured.
    var appleRoots = [X509Certificate.appleRootCAG3]
    if !configuration.appleRootCAFiles.isEmpty {
      appleRoots = []
      for file in configuration.appleRootCAFiles {
        do {
          let certificates = try X509Certificate.certificates(fromPEM: try String(contentsOfFile: file, encoding: .utf8))
          guard !certificates.isEmpty else { return fail("--apple-root-ca \(file): no certificate in the file", status: 2) }
          appleRoots += certificates
        } catch {
          return fail("--apple-root-ca \(file): \(error)", status: 2)
        }
      }
      log.info("trusted roots for App Store signed data", [
        ("certificates", .array(appleRoots.map { .string($0.sha256Fingerprint) }))
      ])
    }
    var limits = ServiceLimits()
    limits.tenantRequestsPerSecond = configuration.tenantRateLimit
    limits.tenantBurst = configuration.tenantBurst
    limits.webhooks = WebhookLimits(
      perApp: configuration.maxWebhooksPerApp, perTenant: configuration.maxWebhooksPerTenant)
    limits.maxWorkingSetBytes = configuration.maxWorkingSetBytes > 0 ? configuration.maxWorkingSetBytes : nil
    guard let serverAPIProductionURL = URL(string: configuration.appStoreServerAPIProductionURL),
      let serverAPISandboxURL = URL(string: configuration.appStoreServerAPISandboxURL)
    else { return fail("invalid App Store Server API URL", status: 2) }
    // Tests only (--clock-url): the service's time follows another process's clock (the App Store
    // simulator's); connection and webhook POST timeouts, the API clients' backoffs and the logs
    // stay on `clock` (the service environment's `wireClock`).
    var followedClock: FollowedClock?
    if let clockURL = configuration.clockURL, let url = URL(string: clockURL) {
      do { followedClock = try await FollowedClock.start(reading: clockReading(url, requester: applePoster)) } catch {
        return fail("--clock-url: cannot read the clock: \(error)")
      }
      log.info("following a test clock (--clock-url)", [
        ("url", .string(clockURL)), ("now_ms", .integer(followedClock?.wallMs ?? 0)),
      ])
    }
    defer { followedClock?.stop() }
    // Webhooks: the dispatcher delivers the event log to them.
    let serviceEnvironment = ServiceEnvironment(
      clock: followedClock ?? clock, wireClock: clock, randomBytes: SecureRandom.bytes)
    let eventMetrics = EventMetrics()
    // Event cursors under the master key: every instance reads the others' (opaque per app).
    let eventCursors = EventCursors(keyring: keyring)
    let dispatcher = WebhookDispatcher(
      store: store, environment: serviceEnvironment,
      configuration: WebhookDispatcher.Configuration(
        maxInFlightPerTenant: configuration.webhookMaxInFlightPerTenant,
        urlPolicy: WebhookURLPolicy(allowPrivateAddresses: configuration.allowPrivateWebhooks)),
      poster: OutboundHTTPPoster.webhooks(
        client: webhookClient, policy: WebhookURLPolicy(allowPrivateAddresses: configuration.allowPrivateWebhooks)),
      log: log,
      onAttempt: { report in
        eventMetrics.delivery(
          outcome: report.state == .delivered ? "delivered" : report.state == .failed ? "failed" : "retry")
      },
      cursors: eventCursors)
    let service = SubstatusService(
      store: store, environment: serviceEnvironment, limits: limits,
      verifyReceipt: VerifyReceiptClient(
        productionURL: productionURL, sandboxURL: sandboxURL, poster: applePoster, clock: clock), log: log,
      appleRootCertificates: appleRoots,
      appStoreServerAPI: AppStoreServerAPIClient(
        productionURL: serverAPIProductionURL, sandboxURL: serverAPISandboxURL, requester: applePoster, clock: clock,
        appleClock: followedClock ?? clock),
      eventMetrics: eventMetrics, webhookDispatcher: dispatcher, eventCursors: eventCursors)

    // The operator key, created on first start: shown once, stored as a hash.
    do {
      if let key = try await service.bootstrapOperatorKey() {
        if let file = configuration.operatorKeyFile {
          try writeSecretFile(file, key + "\n")
          log.info("created the operator key", [("file", .string(file))])
        } else {
          print("substatusd: created the operator key (shown once; keep it safe):\n\(key)")
          fflush(nil)
        }
      }
    } catch {
      return fail("cannot create the operator key: \(error)")
    }

    // gRPC.
    guard let grpcAddress = HostPort(configuration.grpcListen), let httpAddress = HostPort(configuration.httpListen) else {
      return fail("invalid listen address", status: 2)
    }
    var router = RPCRouter()
    service.register(in: &router)
    // Health and reflection last: they cover every service registered before them.
    let health = HealthService()
    health.register(into: &router)
    ReflectionService(files: ProtoFiles.all).register(into: &router)
    var transportConfiguration = HTTP2ServerTransport.Configuration(host: grpcAddress.host, port: grpcAddress.port)
    if let threads = configuration.grpcThreads { transportConfiguration.threads = threads }
    transportConfiguration.clock = clock
    func seconds(_ value: Double) -> Duration { .milliseconds(Int64((value * 1000).rounded())) }
    transportConfiguration.maxConnectionIdle = configuration.grpcIdleTimeout > 0 ? seconds(configuration.grpcIdleTimeout) : nil
    transportConfiguration.handshakeTimeout = seconds(configuration.grpcHandshakeTimeout)
    transportConfiguration.writeTimeout = configuration.grpcWriteTimeout > 0 ? seconds(configuration.grpcWriteTimeout) : nil
    transportConfiguration.maxConnectionBufferedRequestBytes = configuration.grpcConnectionRequestBuffer
    transportConfiguration.maxBufferedRequestBytes = configuration.grpcRequestBuffer
    transportConfiguration.maxConnections = descriptors.grpcConnections
    transportConfiguration.maxCallsInFlight = configuration.grpcMaxCalls
    transportConfiguration.maxReplyBytesInFlight = configuration.grpcMaxReplyBytes
    transportConfiguration.corsAllowedOrigins = configuration.corsOrigins
    if let certificate = configuration.tlsCertificate, let key = configuration.tlsKey {
      transportConfiguration.tls = TLSConfiguration(
        certificateChainPath: certificate, privateKeyPath: key, clientCAPath: configuration.tlsClientCA)
    }
    let transport: HTTP2ServerTransport
    do { transport = try HTTP2ServerTransport(configuration: transportConfiguration) } catch let error as TLSError {
      return fail("gRPC TLS: \(error)")
    } catch {
      return fail("cannot listen for gRPC on \(configuration.grpcListen): \(error)")
    }
    let server = RPCServer(transport: transport, router: router, interceptors: service.interceptors())
    service.metrics.addSource { transport.metrics.prometheusText() }
    if let storeMetrics { service.metrics.addSource(storeMetrics) }
    service.metrics.addSource {
      OutboundHTTPMetrics.prometheusText(pools: [("webhooks", webhookClient.metrics), ("apple", appleClient.metrics)])
    }

    // HTTP.
    let draining = Atomic<Bool>(false)
    // The HTTP server is created below; /metrics reads its counters through this box.
    let httpMetrics = Mutex<HTTPServer?>(nil)
    let memory = MemoryReturn(interval: configuration.memoryTrimInterval)
    service.metrics.addSource { (httpMetrics.withLock { $0 }?.prometheusText() ?? "") + memory.prometheusText() }
    var httpRouter = service.httpRouter(isDraining: { draining.load(ordering: .relaxed) })
    // The web console (/console): static files from the binary, Chart.js from libjs-chart.js.
    WebConsole().register(in: &httpRouter)
    // Connect and gRPC-Web on the HTTP listener: the gRPC port's router and interceptors, below
    // the listener's own routes (notifications, health, metrics keep precedence).
    var gatewayConfiguration = RPCWebGateway.Configuration()
    gatewayConfiguration.corsAllowedOrigins = configuration.corsOrigins
    gatewayConfiguration.clock = clock
    let gateway = RPCWebGateway(router: router, interceptors: service.interceptors(), configuration: gatewayConfiguration)
    httpRouter.fallback = { request in await gateway.respond(to: request) }
    var httpConfiguration = HTTPServerConfiguration(host: httpAddress.host, port: httpAddress.port)
    httpConfiguration.bodyLimit = { request in gateway.bodyLimit(for: request) }
    httpConfiguration.maxBufferedBodyBytes = configuration.httpRequestBuffer
    httpConfiguration.clock = clock
    httpConfiguration.connectionLimit = descriptors.httpConnections
    httpConfiguration.perAddressConnectionLimit = configuration.httpMaxConnectionsPerAddress
    // Behind proxies (README, "Running behind a reverse proxy"): the client a trusted proxy names
    // is the one the caps count and the logs show; Apple's notifications are never refused by a cap.
    httpConfiguration.trustedProxies = configuration.trustedProxies.compactMap { IPNetwork($0) }
    httpConfiguration.exemptFromClientCaps = { request in
      let parts = request.path.split(separator: "/")
      return parts.count >= 4 && parts[0] == "v1" && parts[1] == "apps" && parts[3] == "apple"
    }
    let refusalLog = RefusalLog(log: log)
    httpConfiguration.onRefusal = { refusal in refusalLog.record(refusal) }
    httpConfiguration.requestHeadTimeout = .milliseconds(Int64(configuration.httpRequestHeadTimeout * 1000))
    if let certificate = configuration.httpTLSCertificate, let key = configuration.httpTLSKey {
      do {
        httpConfiguration.tls = HTTPServerTLS(
          certificateChainPEM: try String(contentsOfFile: certificate, encoding: .utf8),
          privateKeyPEM: try String(contentsOfFile: key, encoding: .utf8))
      } catch {
        server.beginGracefulShutdown()
        return fail("HTTP TLS: cannot read \(certificate) or \(key): \(error.localizedDescription)")
      }
    }
    let http: HTTPServer
    do {
      http = try HTTPServer(configuration: httpConfiguration, router: httpRouter)
    } catch {
      server.beginGracefulShutdown()
      return fail("cannot listen for HTTP on \(configuration.httpListen): \(error)")
    }
    httpMetrics.withLock { $0 = http }

    // SIGHUP: reload the TLS certificate and key; a broken pair keeps the current one.
    if transportConfiguration.tls != nil {
      ProcessSignals.on([SIGHUP]) {
        do {
          try transport.reloadTLSCertificates()
          log.info("reloaded the TLS certificate")
        } catch {
          log.write(.object(["level": .string("error"), "msg": .string("TLS reload failed, keeping the current certificate: \(error)")]))
        }
      }
    }
    let grpcTLS = transportConfiguration.tls != nil
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
        + [
          .init("the memory return", ClosureService(start: { memory.start(load: {
            let grpc = transport.metrics
            let connections = grpc.openConnections + http.openConnections
            let peakCalls = transport.takeCallsInFlightPeak()
            return .init(now: connections + grpc.callsInFlight, peak: connections + peakCalls)
          }) }, stop: { memory.stop() }), stopWithin: .seconds(1)),
        ] + (followedClock.map { followed in
          // The followed clock's reading in flight ends by its own time limit (2 s).
          [.init("the followed clock's poller", ClosureService(stop: {
            if await !followed.stop(waitingAtMost: .seconds(3)) { throw DaemonStopError.leftBehind }
          }), stopWithin: .seconds(4))]
        } ?? []),
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
