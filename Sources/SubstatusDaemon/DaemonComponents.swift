import AppStoreSignedData
import Foundation
import HTTPServer
import OutboundHTTP
import RPCCore
import RPCHTTP2Transport
import RPCWebGateway
import ServiceLifecycle
import SubscriptionStorage
import SubscriptionStoragePostgres
import SubscriptionStorageSQLite
import SubstatusClock
import SubstatusMetrics
import SubstatusService
import SubstatusServiceAPI
import SubstatusWire

// The daemon's components, each made from the configuration by one factory; `SubstatusDaemon.run`
// only wires them together and hands the list to the `ServiceGroup` (docs/architecture.md
// "Modules").

/// Why the daemon cannot start: the message it logs and its exit status (2: a configuration that
/// can never work).
struct StartFailure: Error {
  var message: String
  var status: Int32 = 1
}

/// The outbound HTTP pools (README "Limits"): one for webhooks, whose every address is checked by
/// the webhook rules as it is connected to, one for Apple's endpoints and the test clock (the
/// operator's URLs; a connection of one pool is never reused by the other). Together at most
/// `--outbound-max-connections`, counted in the descriptor reserve.
struct OutboundClients {
  let webhooks: OutboundHTTPClient
  let apple: OutboundHTTPClient

  init(_ configuration: DaemonConfiguration, log: LogSink) {
    let outboundCap = configuration.outboundConnections
    if outboundCap + 32 > configuration.reservedDescriptors {
      log.write(.object([
        "level": .string("warning"),
        "msg": .string("--outbound-max-connections leaves less than 32 of --reserved-descriptors for the store and the runtime"),
        "outbound_max_connections": .integer(Int64(outboundCap)),
      ]))
    }
    let appleConnections = max(1, outboundCap / 4)
    webhooks = OutboundHTTPClient(
      configuration: .init(
        maxConnections: max(1, outboundCap - appleConnections), maxConnectionsPerHost: 16,
        caFile: configuration.outboundCAFile))
    apple = OutboundHTTPClient(
      configuration: .init(
        maxConnections: appleConnections, maxConnectionsPerHost: appleConnections, caFile: configuration.outboundCAFile))
  }

  /// Both pools' counters for `/metrics`.
  func metricFamilies() -> [MetricFamily] {
    OutboundHTTPMetrics.metricFamilies(pools: [("webhooks", webhooks.metrics), ("apple", apple.metrics)])
  }
}

/// The open store, how to close it and its own metrics.
struct OpenedStore {
  let store: any Store
  let close: () -> Void
  let metrics: (@Sendable () -> [MetricFamily])?
}

extension SubstatusDaemon {
  /// The PostgreSQL URL of `--store`, `nil` for SQLite.
  static func postgresURL(_ configuration: DaemonConfiguration) -> String? {
    configuration.store == "sqlite" ? nil : configuration.store
  }

  /// Creates the data directory and, for a SQLite store, takes its lock: one substatusd per SQLite
  /// store (a PostgreSQL store is shared by design).
  static func dataDirectoryLock(_ configuration: DaemonConfiguration) throws(StartFailure) -> DataDirectoryLock? {
    do {
      try FileManager.default.createDirectory(
        atPath: configuration.dataDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    } catch {
      throw StartFailure(
        message: "cannot create data directory \(configuration.dataDirectory): \(error.localizedDescription)")
    }
    do throws(DataDirectoryLock.Failure) {
      return postgresURL(configuration) == nil ? try DataDirectoryLock(directory: configuration.dataDirectory) : nil
    } catch {
      if case .held = error { throw StartFailure(message: "\(error)", status: DataDirectoryLock.busyExitStatus) }
      throw StartFailure(message: "\(error)")
    }
  }

  /// Secrets at rest: the master key from a file, the environment, or one created on first start.
  static func masterKeyring(
    _ configuration: DaemonConfiguration, environment: [String: String]
  ) throws(StartFailure) -> MasterKeyring {
    do {
      if let file = configuration.masterKeyFile {
        return try MasterKeyring.load(file: file)
      } else if let fromEnvironment = try MasterKeyring.load(environment: environment) {
        return fromEnvironment
      } else if postgresURL(configuration) != nil {
        // Several instances share the database: a key made up by one would lock the others out.
        throw StartFailure(
          message:
            "with --store postgres:// every instance needs the same master key: set --master-key-file, \(MasterKeyring.fileEnvironmentVariable) or \(MasterKeyring.environmentVariable)",
          status: 2)
      } else {
        return try MasterKeyring.loadOrCreate(file: configuration.dataDirectory + "/master.key")
      }
    } catch let failure as StartFailure {
      throw failure
    } catch {
      throw StartFailure(message: "master key: \(error)")
    }
  }

  /// Opens the store `--store` names: PostgreSQL, or SQLite in the data directory.
  static func openStore(_ configuration: DaemonConfiguration, keyring: MasterKeyring) throws(StartFailure) -> OpenedStore {
    do {
      if let postgresURL = postgresURL(configuration) {
        let postgres = try PostgresStore(
          configuration: .init(
            url: postgresURL, keyring: keyring, poolSize: configuration.postgresPoolSize,
            historyCacheBytes: configuration.historyCacheMB << 20))
        return OpenedStore(store: postgres, close: postgres.close, metrics: { postgres.historyCacheMetricFamilies() })
      } else {
        var sqliteConfiguration = SQLiteStore.Configuration.dataDirectory(configuration.dataDirectory, keyring: keyring)
        sqliteConfiguration.historyCacheBytes = configuration.historyCacheMB << 20
        let sqlite = try SQLiteStore(configuration: sqliteConfiguration)
        return OpenedStore(
          store: sqlite, close: sqlite.close, metrics: { sqlite.historyCacheMetricFamilies() + sqlite.memoryMetricFamilies() })
      }
    } catch {
      throw StartFailure(message: "cannot open the store: \(error)")
    }
  }

  /// The verifyReceipt client, on the Apple pool; its timeouts and backoffs on `clock`.
  static func verifyReceiptClient(
    _ configuration: DaemonConfiguration, poster: OutboundHTTPPoster, clock: any ServiceClock
  ) throws(StartFailure) -> VerifyReceiptClient {
    guard let productionURL = URL(string: configuration.verifyReceiptProductionURL),
      let sandboxURL = URL(string: configuration.verifyReceiptSandboxURL)
    else { throw StartFailure(message: "invalid verifyReceipt URL", status: 2) }
    return VerifyReceiptClient(productionURL: productionURL, sandboxURL: sandboxURL, poster: poster, clock: clock)
  }

  /// The roots App Store signed data must chain to: Apple Root CA - G3 unless configured.
  static func appleRootCertificates(
    _ configuration: DaemonConfiguration, log: LogSink
  ) throws(StartFailure) -> [X509Certificate] {
    guard !configuration.appleRootCAFiles.isEmpty else { return [X509Certificate.appleRootCAG3] }
    var appleRoots: [X509Certificate] = []
    for file in configuration.appleRootCAFiles {
      do {
        let certificates = try X509Certificate.certificates(fromPEM: try String(contentsOfFile: file, encoding: .utf8))
        guard !certificates.isEmpty else {
          throw StartFailure(message: "--apple-root-ca \(file): no certificate in the file", status: 2)
        }
        appleRoots += certificates
      } catch let failure as StartFailure {
        throw failure
      } catch {
        throw StartFailure(message: "--apple-root-ca \(file): \(error)", status: 2)
      }
    }
    log.info("trusted roots for App Store signed data", [
      ("certificates", .array(appleRoots.map { .string($0.sha256Fingerprint) }))
    ])
    return appleRoots
  }

  /// The service's limits from the flags.
  static func serviceLimits(_ configuration: DaemonConfiguration) -> ServiceLimits {
    var limits = ServiceLimits()
    limits.tenantRequestsPerSecond = configuration.tenantRateLimit
    limits.tenantBurst = configuration.tenantBurst
    limits.webhooks = WebhookLimits(
      perApp: configuration.maxWebhooksPerApp, perTenant: configuration.maxWebhooksPerTenant)
    limits.maxWorkingSetBytes = configuration.maxWorkingSetBytes > 0 ? configuration.maxWorkingSetBytes : nil
    return limits
  }

  /// The App Store Server API's base URLs (checked before anything starts; the client is made
  /// with the service, once the clock of Apple's time is known).
  static func appStoreServerAPIURLs(_ configuration: DaemonConfiguration) throws(StartFailure) -> (production: URL, sandbox: URL) {
    guard let production = URL(string: configuration.appStoreServerAPIProductionURL),
      let sandbox = URL(string: configuration.appStoreServerAPISandboxURL)
    else { throw StartFailure(message: "invalid App Store Server API URL", status: 2) }
    return (production, sandbox)
  }

  /// Tests only (`--clock-url`): the service's time follows another process's clock (the App
  /// Store simulator's); connection and webhook POST timeouts, the API clients' backoffs and the
  /// logs stay on the daemon's clock (the service environment's `wireClock`).
  static func followedClock(
    _ configuration: DaemonConfiguration, requester: OutboundHTTPPoster, log: LogSink
  ) async throws(StartFailure) -> FollowedClock? {
    guard let clockURL = configuration.clockURL, let url = URL(string: clockURL) else { return nil }
    let followed: FollowedClock
    do { followed = try await FollowedClock.start(reading: clockReading(url, requester: requester)) } catch {
      throw StartFailure(message: "--clock-url: cannot read the clock: \(error)")
    }
    log.info("following a test clock (--clock-url)", [
      ("url", .string(clockURL)), ("now_ms", .integer(followed.wallMs)),
    ])
    return followed
  }

  /// The webhook dispatcher: it delivers the event log through the webhook pool, every address
  /// checked by the webhook URL rules.
  static func webhookDispatcher(
    _ configuration: DaemonConfiguration, store: any Store, environment: ServiceEnvironment,
    client: OutboundHTTPClient, log: LogSink, eventMetrics: EventMetrics, cursors: EventCursors
  ) -> WebhookDispatcher {
    WebhookDispatcher(
      store: store, environment: environment,
      configuration: WebhookDispatcher.Configuration(
        maxInFlightPerTenant: configuration.webhookMaxInFlightPerTenant,
        urlPolicy: WebhookURLPolicy(allowPrivateAddresses: configuration.allowPrivateWebhooks)),
      poster: OutboundHTTPPoster.webhooks(
        client: client, policy: WebhookURLPolicy(allowPrivateAddresses: configuration.allowPrivateWebhooks)),
      log: log,
      onAttempt: { report in
        eventMetrics.delivery(
          outcome: report.state == .delivered ? "delivered" : report.state == .failed ? "failed" : "retry")
      },
      cursors: cursors)
  }

  /// The operator key, created on first start: shown once (or written to `--operator-key-file`),
  /// stored as a hash.
  static func bootstrapOperatorKey(
    _ configuration: DaemonConfiguration, service: SubstatusService, log: LogSink
  ) async throws(StartFailure) {
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
      throw StartFailure(message: "cannot create the operator key: \(error)")
    }
  }

  /// The router of every service, health and reflection last (they cover every service
  /// registered before them).
  static func rpcRouter(_ service: SubstatusService, health: HealthService) -> RPCRouter {
    var router = RPCRouter()
    service.register(in: &router)
    health.register(into: &router)
    ReflectionService(files: ProtoFiles.all).register(into: &router)
    return router
  }

  /// The gRPC listener's transport, bound to `address`.
  static func grpcTransport(
    _ configuration: DaemonConfiguration, address: HostPort, descriptors: DescriptorBudget, clock: any ServiceClock
  ) throws(StartFailure) -> HTTP2ServerTransport {
    var transportConfiguration = HTTP2ServerTransport.Configuration(host: address.host, port: address.port)
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
    do { return try HTTP2ServerTransport(configuration: transportConfiguration) } catch let error as TLSError {
      throw StartFailure(message: "gRPC TLS: \(error)")
    } catch {
      throw StartFailure(message: "cannot listen for gRPC on \(configuration.grpcListen): \(error)")
    }
  }

  /// Connect and gRPC-Web on the HTTP listener: the gRPC port's router and interceptors.
  static func webGateway(
    _ configuration: DaemonConfiguration, router: RPCRouter, service: SubstatusService, clock: any ServiceClock
  ) -> RPCWebGateway {
    var gatewayConfiguration = RPCWebGateway.Configuration()
    gatewayConfiguration.corsAllowedOrigins = configuration.corsOrigins
    gatewayConfiguration.clock = clock
    return RPCWebGateway(router: router, interceptors: service.interceptors(), configuration: gatewayConfiguration)
  }

  /// The HTTP listener, bound to `address`, serving `router` (the gateway below its own routes).
  static func httpServer(
    _ configuration: DaemonConfiguration, address: HostPort, router: HTTPRouter, gateway: RPCWebGateway,
    descriptors: DescriptorBudget, clock: any ServiceClock, log: LogSink
  ) throws(StartFailure) -> HTTPServer {
    var httpConfiguration = HTTPServerConfiguration(host: address.host, port: address.port)
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
        throw StartFailure(
          message: "HTTP TLS: cannot read \(certificate) or \(key): \(error.localizedDescription)")
      }
    }
    do {
      return try HTTPServer(configuration: httpConfiguration, router: router)
    } catch {
      throw StartFailure(message: "cannot listen for HTTP on \(configuration.httpListen): \(error)")
    }
  }
}

extension SubstatusDaemon {
  /// The memory return (`MemoryReturn`), judged by the listeners' load: connections and calls in
  /// flight now and their peak since the last look.
  static func memoryReturnService(
    _ memory: MemoryReturn, transport: HTTP2ServerTransport, http: HTTPServer
  ) -> ServiceGroup.Member {
    .init("the memory return", ClosureService(start: { memory.start(load: {
      let grpc = transport.metrics
      let connections = grpc.openConnections + http.openConnections
      let peakCalls = transport.takeCallsInFlightPeak()
      return .init(now: connections + grpc.callsInFlight, peak: connections + peakCalls)
    }) }, stop: { memory.stop() }), stopWithin: .seconds(1))
  }

  /// The followed clock's poller (`--clock-url`): its reading in flight ends by its own time
  /// limit (2 s).
  static func followedClockService(_ followed: FollowedClock) -> ServiceGroup.Member {
    .init("the followed clock's poller", ClosureService(stop: {
      if await !followed.stop(waitingAtMost: .seconds(3)) { throw DaemonStopError.leftBehind }
    }), stopWithin: .seconds(4))
  }
}
