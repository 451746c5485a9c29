import Foundation
import HTTPServer
import SubstatusJSON

/// substatusd's settings, from a JSON config file, then environment variables, then flags (each
/// overriding the one before).
///
/// | flag | environment | config file key | default |
/// | --- | --- | --- | --- |
/// | `--data-dir DIR` | `SUBSTATUS_DATA_DIR` | `data_dir` | required |
/// | `--store sqlite\|postgres://…` | `SUBSTATUS_STORE` | `store` | `sqlite` |
/// | `--grpc-listen HOST:PORT` | `SUBSTATUS_GRPC_LISTEN` | `grpc_listen` | `127.0.0.1:50051` |
/// | `--http-listen HOST:PORT` | `SUBSTATUS_HTTP_LISTEN` | `http_listen` | `127.0.0.1:8080` |
/// | `--ready-file F` | `SUBSTATUS_READY_FILE` | `ready_file` | none |
/// | `--operator-key-file F` | `SUBSTATUS_OPERATOR_KEY_FILE` | `operator_key_file` | none (printed) |
/// | `--verify-receipt-production-url URL` | `SUBSTATUS_VERIFY_RECEIPT_PRODUCTION_URL` | `verify_receipt_production_url` | Apple's |
/// | `--verify-receipt-sandbox-url URL` | `SUBSTATUS_VERIFY_RECEIPT_SANDBOX_URL` | `verify_receipt_sandbox_url` | Apple's |
/// | `--grpc-threads N` | `SUBSTATUS_GRPC_THREADS` | `grpc_threads` | CPUs it may run on |
/// | `--tenant-rate-limit RPS` | `SUBSTATUS_TENANT_RATE_LIMIT` | `tenant_rate_limit` | 0 (off) |
/// | `--tenant-burst N` | `SUBSTATUS_TENANT_BURST` | `tenant_burst` | 100 |
/// | `--refresh-interval SECONDS` | `SUBSTATUS_REFRESH_INTERVAL` | `refresh_interval` | 60 (0: off) |
/// | `--refresh-concurrency N` | `SUBSTATUS_REFRESH_CONCURRENCY` | `refresh_concurrency` | 8 |
/// | `--refresh-tenant-concurrency N` | `SUBSTATUS_REFRESH_TENANT_CONCURRENCY` | `refresh_tenant_concurrency` | 2 |
/// | `--refresh-lease SECONDS` | `SUBSTATUS_REFRESH_LEASE` | `refresh_lease` | 300 |
/// | `--refresh-batch-size N` | `SUBSTATUS_REFRESH_BATCH_SIZE` | `refresh_batch_size` | 200 |
/// | `--keep-notifications-days N` | `SUBSTATUS_KEEP_NOTIFICATIONS_DAYS` | `keep_notifications_days` | 180 (0: for ever) |
/// | `--master-key-file F` | `SUBSTATUS_MASTER_KEY_FILE` (or `SUBSTATUS_MASTER_KEY`) | `master_key_file` | `DATA_DIR/master.key`, created on first start |
/// | `--tls-cert F` | `SUBSTATUS_TLS_CERT` | `tls_cert` | none (cleartext h2c) |
/// | `--tls-key F` | `SUBSTATUS_TLS_KEY` | `tls_key` | none |
/// | `--tls-client-ca F` | `SUBSTATUS_TLS_CLIENT_CA` | `tls_client_ca` | none (no client certificates) |
/// | `--http-tls-cert F` | `SUBSTATUS_HTTP_TLS_CERT` | `http_tls_cert` | none (plain HTTP) |
/// | `--http-tls-key F` | `SUBSTATUS_HTTP_TLS_KEY` | `http_tls_key` | none |
/// | `--app-store-server-api-production-url URL` | `SUBSTATUS_APP_STORE_SERVER_API_PRODUCTION_URL` | `app_store_server_api_production_url` | `https://api.storekit.apple.com` |
/// | `--app-store-server-api-sandbox-url URL` | `SUBSTATUS_APP_STORE_SERVER_API_SANDBOX_URL` | `app_store_server_api_sandbox_url` | `https://api.storekit-sandbox.apple.com` |
/// | `--reconcile-interval SECONDS` | `SUBSTATUS_RECONCILE_INTERVAL` | `reconcile_interval` | 3600 (0: off) |
/// | `--grpc-idle-timeout SECONDS` | `SUBSTATUS_GRPC_IDLE_TIMEOUT` | `grpc_idle_timeout` | 300 (0: off) |
/// | `--grpc-handshake-timeout SECONDS` | `SUBSTATUS_GRPC_HANDSHAKE_TIMEOUT` | `grpc_handshake_timeout` | 10 |
/// | `--grpc-write-timeout SECONDS` | `SUBSTATUS_GRPC_WRITE_TIMEOUT` | `grpc_write_timeout` | 60 (0: off) |
/// | `--grpc-connection-request-buffer BYTES` | `SUBSTATUS_GRPC_CONNECTION_REQUEST_BUFFER` | `grpc_connection_request_buffer` | 8 MiB |
/// | `--grpc-request-buffer BYTES` | `SUBSTATUS_GRPC_REQUEST_BUFFER` | `grpc_request_buffer` | 256 MiB |
/// | `--apple-root-ca F` (repeatable) | `SUBSTATUS_APPLE_ROOT_CA` (paths joined by `:`) | `apple_root_ca` (a path or an array of paths) | Apple Root CA - G3 |
/// | `--reserved-descriptors N` | `SUBSTATUS_RESERVED_DESCRIPTORS` | `reserved_descriptors` | 128 |
/// | `--grpc-max-connections N` | `SUBSTATUS_GRPC_MAX_CONNECTIONS` | `grpc_max_connections` | from the descriptor limit (``DescriptorBudget``) |
/// | `--grpc-max-calls N` | `SUBSTATUS_GRPC_MAX_CALLS` | `grpc_max_calls` | 1024 |
/// | `--grpc-max-reply-bytes N` | `SUBSTATUS_GRPC_MAX_REPLY_BYTES` | `grpc_max_reply_bytes` | 67108864 (64 MiB) |
/// | `--max-working-set-bytes N` | `SUBSTATUS_MAX_WORKING_SET_BYTES` | `max_working_set_bytes` | 134217728 (128 MiB; 0: off) |
/// | `--http-max-connections N` | `SUBSTATUS_HTTP_MAX_CONNECTIONS` | `http_max_connections` | from the descriptor limit (``DescriptorBudget``) |
/// | `--http-max-connections-per-address N` | `SUBSTATUS_HTTP_MAX_CONNECTIONS_PER_ADDRESS` | `http_max_connections_per_address` | 16 |
/// | `--http-request-head-timeout SECONDS` | `SUBSTATUS_HTTP_REQUEST_HEAD_TIMEOUT` | `http_request_head_timeout` | 10 |
/// | `--http-request-buffer BYTES` | `SUBSTATUS_HTTP_REQUEST_BUFFER` | `http_request_buffer` | 64 MiB |
/// | `--trusted-proxies CIDR[,CIDR…]` (repeatable) | `SUBSTATUS_TRUSTED_PROXIES` (ranges joined by `,`) | `trusted_proxies` (a list or an array) | none |
/// | `--memory-trim-interval SECONDS` | `SUBSTATUS_MEMORY_TRIM_INTERVAL` | `memory_trim_interval` | 5 (0: off) |
/// | `--history-cache-mb N` | `SUBSTATUS_HISTORY_CACHE_MB` | `history_cache_mb` | 0 (off) |
/// | `--postgres-pool-size N` | `SUBSTATUS_POSTGRES_POOL_SIZE` | `postgres_pool_size` | 4 (PostgreSQL store only) |
/// | `--cors-origin ORIGIN` (repeatable) | `SUBSTATUS_CORS_ORIGIN` (origins joined by `,`) | `cors_origin` (an origin or an array) | none |
/// | `--max-webhooks-per-app N` | `SUBSTATUS_MAX_WEBHOOKS_PER_APP` | `max_webhooks_per_app` | 16 |
/// | `--max-webhooks-per-tenant N` | `SUBSTATUS_MAX_WEBHOOKS_PER_TENANT` | `max_webhooks_per_tenant` | 256 |
/// | `--webhook-max-in-flight-per-tenant N` | `SUBSTATUS_WEBHOOK_MAX_IN_FLIGHT_PER_TENANT` | `webhook_max_in_flight_per_tenant` | 32 |
/// | `--outbound-max-connections N` | `SUBSTATUS_OUTBOUND_MAX_CONNECTIONS` | `outbound_max_connections` | half the descriptor reserve (64) |
/// | `--outbound-ca-file F` | `SUBSTATUS_OUTBOUND_CA_FILE` | `outbound_ca_file` | none (the system's roots) |
/// | `--allow-private-webhooks` (no value) | `SUBSTATUS_ALLOW_PRIVATE_WEBHOOKS` (`true`/`false`) | `allow_private_webhooks` (a boolean) | off |
/// | `--clock-url URL` (tests only) | `SUBSTATUS_CLOCK_URL` | `clock_url` | none (the system clock) |
public struct DaemonConfiguration: Sendable, Equatable {
  /// Where the SQLite database (and, by default, the master key) live.
  public var dataDirectory: String = ""
  /// `sqlite`, or a `postgres://` URL.
  public var store: String = "sqlite"
  /// The gRPC listener.
  public var grpcListen: String = "127.0.0.1:50051"
  /// The HTTP/1.1 listener (notifications, health, metrics).
  public var httpListen: String = "127.0.0.1:8080"
  /// Where to write `{"grpc":"HOST:PORT","http":"HOST:PORT"}` once both listeners accept.
  public var readyFile: String?
  /// Where to write the operator key created on first start (mode 0600) instead of printing it.
  public var operatorKeyFile: String?
  /// Apple's production verifyReceipt URL, or the App Store simulator's.
  public var verifyReceiptProductionURL: String = "https://buy.itunes.apple.com/verifyReceipt"
  /// Apple's sandbox verifyReceipt URL, or the App Store simulator's.
  public var verifyReceiptSandboxURL: String = "https://sandbox.itunes.apple.com/verifyReceipt"
  /// The App Store Server API's production base URL, or the App Store simulator's.
  public var appStoreServerAPIProductionURL: String = "https://api.storekit.apple.com"
  /// The App Store Server API's sandbox base URL, or the App Store simulator's.
  public var appStoreServerAPISandboxURL: String = "https://api.storekit-sandbox.apple.com"
  /// Seconds between reconciliations with Apple's notification history; 0 turns them off.
  public var reconcileInterval: Double = 3600
  /// gRPC event loop threads; `nil` means one per CPU the process may run on (its affinity).
  public var grpcThreads: Int?
  /// Requests per second per tenant; 0 turns the limit off.
  public var tenantRateLimit: Double = 0
  /// Burst of the per-tenant limit.
  public var tenantBurst: Double = 100
  /// The master key file; `nil` means `SUBSTATUS_MASTER_KEY(_FILE)` or `DATA_DIR/master.key`.
  public var masterKeyFile: String?
  /// Seconds between background receipt refresh ticks; 0 turns the refresh off.
  public var refreshInterval: Double = 60
  /// Receipt verifications the background refresh runs at once.
  public var refreshConcurrency: Int = 8
  /// Receipt verifications the background refresh runs at once for one tenant.
  public var refreshTenantConcurrency: Int = 2
  /// Seconds a claimed batch of due receipts stays this instance's: other instances on the same
  /// database skip it meanwhile; if this instance dies, its receipts are due again after it.
  public var refreshLease: Double = 300
  /// Due receipts one claim takes (instances sharing a database split the due receipts by batch).
  public var refreshBatchSize: Int = 200
  /// Days a kept V2 notification (rule 25) is kept after it was received; 0 keeps them for ever.
  /// The default is Apple's own notification history (Get Notification History covers 180 days):
  /// what substatus derived from a notification (histories, events) stays regardless, and the
  /// signed payloads, a few KiB each, are the bulk of a busy app's database.
  public var keepNotificationsDays: Int = 180
  /// The gRPC listener's certificate chain (PEM); with ``tlsKey``, gRPC is served over TLS.
  public var tlsCertificate: String?
  /// The private key (PEM) of ``tlsCertificate``.
  public var tlsKey: String?
  /// CA certificates (PEM) that gRPC clients' certificates must chain to (mutual TLS).
  public var tlsClientCA: String?
  /// The HTTP listener's certificate chain (PEM); with ``httpTLSKey``, it serves HTTPS.
  public var httpTLSCertificate: String?
  /// The private key (PEM) of ``httpTLSCertificate``.
  public var httpTLSKey: String?
  /// PEM files of the root certificates that App Store signed data (V2 notifications, StoreKit 2
  /// signed transactions and renewal infos) must chain to; each file may hold several
  /// certificates. Empty: Apple Root CA - G3 only.
  public var appleRootCAFiles: [String] = []

  // MARK: Listener and process limits (README "Limits")

  /// Seconds a gRPC connection may stay without calls before GOAWAY and close; 0 never.
  public var grpcIdleTimeout: Double = 300
  /// Seconds a gRPC connection has to complete TLS and the HTTP/2 preface.
  public var grpcHandshakeTimeout: Double = 10
  /// Seconds a gRPC connection's replies may stay stuck (a reader that stopped reading) before it
  /// is closed; 0 never.
  public var grpcWriteTimeout: Double = 60
  /// The request bytes one gRPC connection may hold buffered across its calls.
  public var grpcConnectionRequestBuffer: Int = 8 << 20
  /// The request bytes all gRPC connections together may hold buffered.
  public var grpcRequestBuffer: Int = 256 << 20
  /// Descriptors kept out of the listeners' caps for the store, outbound calls and the runtime.
  public var reservedDescriptors: Int = 128
  /// Outbound HTTP connections open at once (webhooks and Apple's endpoints together), counted in
  /// ``reservedDescriptors``; `nil`: half the reserve.
  public var outboundMaxConnections: Int?
  /// A PEM file of certificates trusted for outbound HTTPS besides the system's roots (private
  /// webhook receivers).
  public var outboundCAFile: String?

  /// The outbound connection cap in force.
  public var outboundConnections: Int { outboundMaxConnections ?? max(8, reservedDescriptors / 2) }
  /// gRPC connections served at once; `nil` derives it from the descriptor limit
  /// (``DescriptorBudget``).
  public var grpcMaxConnections: Int?
  /// gRPC calls in flight over all connections; beyond it `RESOURCE_EXHAUSTED` with `RetryInfo`.
  public var grpcMaxCalls: Int = 1024
  /// gRPC reply bytes not yet taken by a socket, over all connections; while more are pending,
  /// new calls get `RESOURCE_EXHAUSTED` with `RetryInfo`.
  public var grpcMaxReplyBytes: Int = 64 << 20
  /// The estimated working set heavy calls in flight may hold at once, reserved before the
  /// store is read (`SubstatusService.WorkingSetBudget`); beyond it `RESOURCE_EXHAUSTED` with
  /// `RetryInfo`. 0 turns the budget off.
  public var maxWorkingSetBytes: Int = 128 << 20
  /// HTTP connections served at once; `nil` derives it from the descriptor limit.
  public var httpMaxConnections: Int?
  /// HTTP connections from one client address.
  public var httpMaxConnectionsPerAddress: Int = 16
  /// Seconds an HTTP connection has to send a whole request head.
  public var httpRequestHeadTimeout: Double = 10
  /// The request body bytes all HTTP connections together may hold (RPC bodies reach 4 MiB, so
  /// the connection cap alone would allow gigabytes).
  public var httpRequestBuffer: Int = 64 << 20
  /// Seconds between checks that return freed heap pages to the system after a load has gone;
  /// 0 turns them off.
  public var memoryTrimInterval: Double = 5
  /// MiB of decoded user histories the store (SQLite or PostgreSQL) keeps in memory, so that
  /// reading a user whose data has not changed skips the database (`docs/evaluation-cache.md`); 0
  /// turns it off. On PostgreSQL an instance with the cache listens to the other instances'
  /// changes (one more connection) and serves them within about a second. Off by
  /// default: on random reads over 100,000 users it hits about 5 % of reads, and holding their
  /// whole working set (7–10 KB per decoded history) would break the 128 MB RSS target; it pays
  /// on loads that read the same users again (docs/evaluation-cache.md).
  public var historyCacheMB: Int = 0
  /// Connections to PostgreSQL this instance keeps (`--store postgres://`): transactions run on
  /// all of them, and from 2 on one is kept for single statements (reads) so they never queue
  /// behind writes. Each costs a server process: instances × size must stay under the server's
  /// `max_connections`.
  public var postgresPoolSize: Int = 4

  /// The web origins (`scheme://host[:port]`, as browsers send them in `Origin`) whose pages may
  /// call the API with Connect or gRPC-Web on both listeners (CORS); none by default. `*` is
  /// refused: the listeners often sit on a private network, and naming each origin keeps a web
  /// page anywhere from reaching them through a visitor's browser.
  public var corsOrigins: [String] = []
  /// Reverse proxies whose `X-Forwarded-For` / `Forwarded` the HTTP listener believes (CIDR
  /// ranges, normalized: `127.0.0.1/32`).
  public var trustedProxies: [String] = []

  /// Whether webhooks may point at loopback, link-local and private addresses (a receiver on the
  /// same machine or network, for development and tests); refused by default, at creation and at
  /// each delivery (docs/architecture.md "Events").
  public var allowPrivateWebhooks = false
  /// Webhooks one app may have (CreateWebhook beyond: `RESOURCE_EXHAUSTED`).
  public var maxWebhooksPerApp = 16
  /// Webhooks one tenant may have over all its apps.
  public var maxWebhooksPerTenant = 256
  /// Webhook POSTs in flight at once for one tenant (its deliveries held: 4 times this), so one
  /// tenant's backlog never takes the slots of the others.
  public var webhookMaxInFlightPerTenant = 32

  /// For end-to-end tests only: a loopback `http://` URL whose `GET` answers a JSON object with
  /// `now_ms` (the App Store simulator's `/control/clock`). The service's time (events, the
  /// transition scheduler, webhook retries, timeouts and leases, refreshes, logs) then follows that
  /// clock (``SubstatusClock/FollowedClock``), polled every 20 ms; connection and network timeouts
  /// stay on the real clock. `nil`: the system clock.
  public var clockURL: String?

  /// The defaults.
  public init() {}

  /// A usage error: a one-line message, exit status 2.
  public struct UsageError: Error, Equatable, CustomStringConvertible {
    /// What is wrong.
    public var description: String
  }

  /// The `--help` text.
  public static let help = """
    usage: substatusd --data-dir DIR [options]

    Serves the substatus gRPC API and the HTTP endpoints for Apple's notifications.

    options (flags override environment variables, which override the --config file):
      --data-dir DIR                         database directory (env SUBSTATUS_DATA_DIR)
      --store sqlite|postgres://...          the store (default sqlite)
      --grpc-listen HOST:PORT                gRPC address (default 127.0.0.1:50051; port 0 picks one)
      --http-listen HOST:PORT                HTTP address (default 127.0.0.1:8080; port 0 picks one)
      --ready-file F                         write {"grpc":...,"http":...} once listening
      --operator-key-file F                  write the first-start operator key here (0600)
      --config FILE                          JSON file with the same settings (keys: data_dir, ...)
      --verify-receipt-production-url URL    verifyReceipt production endpoint (default Apple's)
      --verify-receipt-sandbox-url URL       verifyReceipt sandbox endpoint (default Apple's)
      --app-store-server-api-production-url URL
                                             App Store Server API production base URL
                                             (default https://api.storekit.apple.com)
      --app-store-server-api-sandbox-url URL App Store Server API sandbox base URL
                                             (default https://api.storekit-sandbox.apple.com)
      --reconcile-interval SECONDS           reconcile apps with an In-App Purchase key with Apple's
                                             notification history this often (default 3600; 0: off)
      --grpc-threads N                       gRPC event loops (default: one per CPU it may run on)
      --tenant-rate-limit RPS                requests per second per tenant (default 0: off)
      --tenant-burst N                       burst of the per-tenant limit (default 100)
      --refresh-interval SECONDS             re-verify due receipts this often (default 60; 0: off)
      --refresh-concurrency N                receipt verifications in flight at once (default 8)
      --refresh-tenant-concurrency N         ... of them for one tenant (default 2)
      --refresh-lease SECONDS                a claimed batch is this instance's for this long;
                                             others skip it, and take it over if this one dies (default 300)
      --refresh-batch-size N                 due receipts claimed at once (default 200)
      --keep-notifications-days N            delete kept V2 notifications received more than N days ago
                                             (default 180, Apple's notification history; 0: keep for ever)
      --master-key-file F                    AES-256-GCM master key for secrets at rest
                                             (default SUBSTATUS_MASTER_KEY(_FILE), else DATA_DIR/master.key)
      --tls-cert F --tls-key F               serve gRPC over TLS with this PEM chain and key
                                             (SIGHUP reloads them for new connections)
      --tls-client-ca F                      require client certificates signed by these CAs (mTLS)
      --http-tls-cert F --http-tls-key F     serve the HTTP listener over HTTPS (read at start)
      --grpc-idle-timeout SECONDS            GOAWAY and close a gRPC connection without calls this
                                             long (default 300; 0: never)
      --grpc-handshake-timeout SECONDS       close a connection that has not completed TLS and the
                                             HTTP/2 preface by then (default 10)
      --grpc-write-timeout SECONDS           close a connection whose replies cannot move (its reader
                                             stopped reading) this long (default 60; 0: never)
      --grpc-connection-request-buffer BYTES request bytes one connection may hold buffered; beyond
                                             it calls end RESOURCE_EXHAUSTED (default 8388608)
      --grpc-request-buffer BYTES            ... all connections together (default 268435456)
      --apple-root-ca F                      trust this PEM root (bundle) for App Store signed data
                                             instead of Apple Root CA - G3; repeatable
                                             (env SUBSTATUS_APPLE_ROOT_CA: paths joined by ':')
    limits (see README "Limits"; the soft open-files limit is raised to the hard one at start):
      --reserved-descriptors N               descriptors kept for the store, outbound calls and
                                             the runtime, outside the listeners' caps (default 128)
      --outbound-max-connections N           outbound HTTP connections at once, webhooks and Apple
                                             together, counted in the reserve (default: half of it)
      --grpc-max-connections N               gRPC connections at once (default: 3/4 of the open-files
                                             limit less the reserve, at most 4096)
      --grpc-max-calls N                     gRPC calls in flight overall (default 1024)
      --grpc-max-reply-bytes N               gRPC reply bytes not yet sent, overall (default 64 MiB)
      --max-working-set-bytes N              estimated memory of calls in flight (pages of
                                             histories), reserved before the store is read;
                                             beyond it RESOURCE_EXHAUSTED (default 128 MiB; 0: off)
      --http-max-connections N               HTTP connections at once (default: 1/4 of the open-files
                                             limit less the reserve, at most 1024)
      --http-max-connections-per-address N   HTTP connections from one client address (default 16)
      --http-request-head-timeout SECONDS    time to send a whole HTTP request head (default 10)
      --http-request-buffer BYTES            HTTP request body bytes held at once, all connections;
                                             beyond it 503 (resource_exhausted for RPCs) (default 67108864)
      --trusted-proxies CIDR[,CIDR...]       reverse proxies in front of the HTTP listener: for their
                                             connections the client is the right-most untrusted address
                                             of X-Forwarded-For (or Forwarded: for=), and the
                                             per-address cap counts its requests in flight (default none)
      --memory-trim-interval SECONDS         return freed heap pages after a load (default 5; 0: off)
      --history-cache-mb N                   MiB of user histories kept in memory by the store (on
                                             PostgreSQL: one more connection, other instances'
                                             writes seen within 1 s) (default 0: off)
      --postgres-pool-size N                 connections to PostgreSQL per instance (default 4; one
                                             serves only reads from 2 on)
    browsers:
      --cors-origin ORIGIN                   let web pages from ORIGIN (scheme://host[:port], e.g.
                                             https://console.example.com) call the API with Connect
                                             or gRPC-Web on both listeners (CORS); repeatable; none by
                                             default; '*' is refused (name each origin)
                                             (env SUBSTATUS_CORS_ORIGIN: origins joined by ',')
    webhooks:
      --allow-private-webhooks               let webhooks POST to loopback, link-local and private
                                             addresses (refused by default; for receivers on this
                                             machine or network) (env SUBSTATUS_ALLOW_PRIVATE_WEBHOOKS=true)
      --max-webhooks-per-app N               webhooks one app may have; CreateWebhook beyond is
                                             RESOURCE_EXHAUSTED (default 16)
      --max-webhooks-per-tenant N            ... one tenant over all its apps (default 256)
      --webhook-max-in-flight-per-tenant N   webhook POSTs in flight at once for one tenant; its
                                             deliveries are claimed in turn with the others'
                                             (default 32, half of the 64 overall)
      --outbound-ca-file F                   trust the certificates of this PEM file for outbound
                                             HTTPS (webhooks, Apple) besides the system's roots
    tests only:
      --clock-url URL                        follow the clock GET URL answers ({"now_ms": N}, e.g. the
                                             App Store simulator's http://127.0.0.1:PORT/control/clock)
                                             instead of the system clock; loopback http URLs only
      --help                                 this text
    """

  private static let keys: [(flag: String, env: String, key: String)] = [
    ("--data-dir", "SUBSTATUS_DATA_DIR", "data_dir"),
    ("--store", "SUBSTATUS_STORE", "store"),
    ("--grpc-listen", "SUBSTATUS_GRPC_LISTEN", "grpc_listen"),
    ("--http-listen", "SUBSTATUS_HTTP_LISTEN", "http_listen"),
    ("--ready-file", "SUBSTATUS_READY_FILE", "ready_file"),
    ("--operator-key-file", "SUBSTATUS_OPERATOR_KEY_FILE", "operator_key_file"),
    ("--verify-receipt-production-url", "SUBSTATUS_VERIFY_RECEIPT_PRODUCTION_URL", "verify_receipt_production_url"),
    ("--verify-receipt-sandbox-url", "SUBSTATUS_VERIFY_RECEIPT_SANDBOX_URL", "verify_receipt_sandbox_url"),
    ("--app-store-server-api-production-url", "SUBSTATUS_APP_STORE_SERVER_API_PRODUCTION_URL", "app_store_server_api_production_url"),
    ("--app-store-server-api-sandbox-url", "SUBSTATUS_APP_STORE_SERVER_API_SANDBOX_URL", "app_store_server_api_sandbox_url"),
    ("--reconcile-interval", "SUBSTATUS_RECONCILE_INTERVAL", "reconcile_interval"),
    ("--grpc-threads", "SUBSTATUS_GRPC_THREADS", "grpc_threads"),
    ("--tenant-rate-limit", "SUBSTATUS_TENANT_RATE_LIMIT", "tenant_rate_limit"),
    ("--tenant-burst", "SUBSTATUS_TENANT_BURST", "tenant_burst"),
    ("--master-key-file", "SUBSTATUS_MASTER_KEY_FILE", "master_key_file"),
    ("--refresh-interval", "SUBSTATUS_REFRESH_INTERVAL", "refresh_interval"),
    ("--refresh-concurrency", "SUBSTATUS_REFRESH_CONCURRENCY", "refresh_concurrency"),
    ("--refresh-tenant-concurrency", "SUBSTATUS_REFRESH_TENANT_CONCURRENCY", "refresh_tenant_concurrency"),
    ("--refresh-lease", "SUBSTATUS_REFRESH_LEASE", "refresh_lease"),
    ("--refresh-batch-size", "SUBSTATUS_REFRESH_BATCH_SIZE", "refresh_batch_size"),
    ("--keep-notifications-days", "SUBSTATUS_KEEP_NOTIFICATIONS_DAYS", "keep_notifications_days"),
    ("--tls-cert", "SUBSTATUS_TLS_CERT", "tls_cert"),
    ("--tls-key", "SUBSTATUS_TLS_KEY", "tls_key"),
    ("--tls-client-ca", "SUBSTATUS_TLS_CLIENT_CA", "tls_client_ca"),
    ("--http-tls-cert", "SUBSTATUS_HTTP_TLS_CERT", "http_tls_cert"),
    ("--http-tls-key", "SUBSTATUS_HTTP_TLS_KEY", "http_tls_key"),
    ("--apple-root-ca", "SUBSTATUS_APPLE_ROOT_CA", "apple_root_ca"),
    ("--grpc-idle-timeout", "SUBSTATUS_GRPC_IDLE_TIMEOUT", "grpc_idle_timeout"),
    ("--grpc-handshake-timeout", "SUBSTATUS_GRPC_HANDSHAKE_TIMEOUT", "grpc_handshake_timeout"),
    ("--grpc-write-timeout", "SUBSTATUS_GRPC_WRITE_TIMEOUT", "grpc_write_timeout"),
    ("--grpc-connection-request-buffer", "SUBSTATUS_GRPC_CONNECTION_REQUEST_BUFFER", "grpc_connection_request_buffer"),
    ("--grpc-request-buffer", "SUBSTATUS_GRPC_REQUEST_BUFFER", "grpc_request_buffer"),
    ("--reserved-descriptors", "SUBSTATUS_RESERVED_DESCRIPTORS", "reserved_descriptors"),
    ("--grpc-max-connections", "SUBSTATUS_GRPC_MAX_CONNECTIONS", "grpc_max_connections"),
    ("--grpc-max-calls", "SUBSTATUS_GRPC_MAX_CALLS", "grpc_max_calls"),
    ("--grpc-max-reply-bytes", "SUBSTATUS_GRPC_MAX_REPLY_BYTES", "grpc_max_reply_bytes"),
    ("--max-working-set-bytes", "SUBSTATUS_MAX_WORKING_SET_BYTES", "max_working_set_bytes"),
    ("--http-max-connections", "SUBSTATUS_HTTP_MAX_CONNECTIONS", "http_max_connections"),
    ("--http-max-connections-per-address", "SUBSTATUS_HTTP_MAX_CONNECTIONS_PER_ADDRESS", "http_max_connections_per_address"),
    ("--http-request-head-timeout", "SUBSTATUS_HTTP_REQUEST_HEAD_TIMEOUT", "http_request_head_timeout"),
    ("--http-request-buffer", "SUBSTATUS_HTTP_REQUEST_BUFFER", "http_request_buffer"),
    ("--memory-trim-interval", "SUBSTATUS_MEMORY_TRIM_INTERVAL", "memory_trim_interval"),
    ("--history-cache-mb", "SUBSTATUS_HISTORY_CACHE_MB", "history_cache_mb"),
    ("--postgres-pool-size", "SUBSTATUS_POSTGRES_POOL_SIZE", "postgres_pool_size"),
    ("--cors-origin", "SUBSTATUS_CORS_ORIGIN", "cors_origin"),
    ("--trusted-proxies", "SUBSTATUS_TRUSTED_PROXIES", "trusted_proxies"),
    ("--allow-private-webhooks", "SUBSTATUS_ALLOW_PRIVATE_WEBHOOKS", "allow_private_webhooks"),
    ("--max-webhooks-per-app", "SUBSTATUS_MAX_WEBHOOKS_PER_APP", "max_webhooks_per_app"),
    ("--max-webhooks-per-tenant", "SUBSTATUS_MAX_WEBHOOKS_PER_TENANT", "max_webhooks_per_tenant"),
    ("--webhook-max-in-flight-per-tenant", "SUBSTATUS_WEBHOOK_MAX_IN_FLIGHT_PER_TENANT", "webhook_max_in_flight_per_tenant"),
    ("--outbound-max-connections", "SUBSTATUS_OUTBOUND_MAX_CONNECTIONS", "outbound_max_connections"),
    ("--outbound-ca-file", "SUBSTATUS_OUTBOUND_CA_FILE", "outbound_ca_file"),
    ("--clock-url", "SUBSTATUS_CLOCK_URL", "clock_url"),
  ]

  /// Flags without a value: present means `true` (the environment variable and config key take
  /// `true` or `false`).
  private static let switches: Set<String> = ["--allow-private-webhooks"]

  /// Flags that may be given several times, with the separator that joins their values (as in the
  /// environment variable): `:` for paths, `,` for origins (which hold `:`).
  private static let repeatable: [String: String] = ["--apple-root-ca": ":", "--cors-origin": ",", "--trusted-proxies": ","]

  /// Reads the settings.
  /// - Parameters:
  ///   - arguments: the command-line arguments after the program name.
  ///   - environment: the process environment.
  ///   - readFile: reads the config file.
  /// - Returns: the configuration, or `nil` when `--help` was asked for.
  /// - Throws: ``UsageError``.
  public static func parse(
    arguments: [String], environment: [String: String],
    readFile: (String) throws -> [UInt8] = { [UInt8](try Data(contentsOf: URL(fileURLWithPath: $0))) }
  ) throws(UsageError) -> DaemonConfiguration? {
    var flags: [String: String] = [:]
    var configPath: String? = environment["SUBSTATUS_CONFIG"]
    var rest = arguments[...]
    while let arg = rest.popFirst() {
      if arg == "--help" || arg == "-h" { return nil }
      var name = arg
      var value: String? = nil
      if let eq = arg.firstIndex(of: "="), arg.hasPrefix("--") {
        name = String(arg[..<eq])
        value = String(arg[arg.index(after: eq)...])
      }
      guard name == "--config" || keys.contains(where: { $0.flag == name }) else {
        throw UsageError(description: "unknown option \(name) (see --help)")
      }
      if value == nil { value = switches.contains(name) ? "true" : rest.popFirst() }
      guard let value, !value.hasPrefix("--") || value == "" else { throw UsageError(description: "\(name) needs a value") }
      if name == "--config" {
        configPath = value
      } else if let separator = repeatable[name], let previous = flags[name] {
        flags[name] = previous + separator + value
      } else {
        flags[name] = value
      }
    }
    var values: [String: String] = [:]
    if let configPath {
      let json: JSONValue
      do { json = try JSONValue(parsing: try readFile(configPath)) } catch {
        throw UsageError(description: "cannot read config file \(configPath): \(error)")
      }
      guard let object = json.objectValue else { throw UsageError(description: "config file \(configPath) must hold a JSON object") }
      for (key, value) in object {
        guard let entry = keys.first(where: { $0.key == key }) else {
          throw UsageError(description: "config file \(configPath): unknown key \"\(key)\"")
        }
        switch value {
        case .string(let s): values[entry.flag] = s
        case .number(let n): values[entry.flag] = n
        case .bool(let b) where switches.contains(entry.flag): values[entry.flag] = b ? "true" : "false"
        case .array(let items) where repeatable[entry.flag] != nil:
          var paths: [String] = []
          for item in items {
            guard case .string(let s) = item else {
              throw UsageError(description: "config file \(configPath): \"\(key)\" must be a string or an array of strings")
            }
            paths.append(s)
          }
          values[entry.flag] = paths.joined(separator: repeatable[entry.flag] ?? ":")
        default: throw UsageError(description: "config file \(configPath): \"\(key)\" must be a string or a number")
        }
      }
    }
    for entry in keys { if let v = environment[entry.env] { values[entry.flag] = v } }
    for (flag, v) in flags { values[flag] = v }

    var c = DaemonConfiguration()
    func number(_ flag: String) throws(UsageError) -> Double? {
      guard let text = values[flag] else { return nil }
      guard let n = Double(text), n >= 0, n.isFinite else { throw UsageError(description: "\(flag) must be a non-negative number, not \"\(text)\"") }
      return n
    }
    c.dataDirectory = values["--data-dir"] ?? ""
    guard !c.dataDirectory.isEmpty else { throw UsageError(description: "--data-dir is required (see --help)") }
    if let v = values["--store"] {
      guard v == "sqlite" || v.hasPrefix("postgres://") || v.hasPrefix("postgresql://") else {
        throw UsageError(description: "--store must be sqlite or a postgres:// URL")
      }
      c.store = v
    }
    for (flag, path) in [("--grpc-listen", \DaemonConfiguration.grpcListen), ("--http-listen", \.httpListen)] {
      if let v = values[flag] {
        guard HostPort(v) != nil else { throw UsageError(description: "\(flag) must be HOST:PORT, not \"\(v)\"") }
        c[keyPath: path] = v
      }
    }
    c.readyFile = values["--ready-file"]
    c.operatorKeyFile = values["--operator-key-file"]
    c.masterKeyFile = values["--master-key-file"]
    c.tlsCertificate = values["--tls-cert"]
    c.tlsKey = values["--tls-key"]
    c.tlsClientCA = values["--tls-client-ca"]
    c.outboundCAFile = values["--outbound-ca-file"]
    guard (c.tlsCertificate == nil) == (c.tlsKey == nil) else {
      throw UsageError(description: "--tls-cert and --tls-key go together")
    }
    guard c.tlsClientCA == nil || c.tlsCertificate != nil else {
      throw UsageError(description: "--tls-client-ca needs --tls-cert and --tls-key")
    }
    c.httpTLSCertificate = values["--http-tls-cert"]
    c.httpTLSKey = values["--http-tls-key"]
    guard (c.httpTLSCertificate == nil) == (c.httpTLSKey == nil) else {
      throw UsageError(description: "--http-tls-cert and --http-tls-key go together")
    }
    if let v = values["--apple-root-ca"] {
      c.appleRootCAFiles = v.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
      guard !c.appleRootCAFiles.contains(where: \.isEmpty) else {
        throw UsageError(description: "--apple-root-ca needs a file path")
      }
    }
    for (flag, path) in [
      ("--verify-receipt-production-url", \DaemonConfiguration.verifyReceiptProductionURL), ("--verify-receipt-sandbox-url", \.verifyReceiptSandboxURL),
      ("--app-store-server-api-production-url", \.appStoreServerAPIProductionURL), ("--app-store-server-api-sandbox-url", \.appStoreServerAPISandboxURL),
    ] {
      if let v = values[flag] {
        guard let url = URL(string: v), url.scheme == "http" || url.scheme == "https", url.host != nil else {
          throw UsageError(description: "\(flag) must be an http(s) URL, not \"\(v)\"")
        }
        c[keyPath: path] = v
      }
    }
    if let n = try number("--grpc-threads") {
      guard n >= 1, n <= 256, n == n.rounded() else { throw UsageError(description: "--grpc-threads must be between 1 and 256") }
      c.grpcThreads = Int(n)
    }
    if let n = try number("--tenant-rate-limit") { c.tenantRateLimit = n }
    if let n = try number("--tenant-burst") { c.tenantBurst = n }
    if let n = try number("--refresh-interval") { c.refreshInterval = n }
    if let n = try number("--reconcile-interval") {
      guard n >= 0 else { throw UsageError(description: "--reconcile-interval must not be negative") }
      c.reconcileInterval = n
    }
    if let n = try number("--refresh-lease") {
      guard n >= 1 else { throw UsageError(description: "--refresh-lease must be at least 1 second") }
      c.refreshLease = n
    }
    for (flag, path) in [("--refresh-concurrency", \DaemonConfiguration.refreshConcurrency), ("--refresh-tenant-concurrency", \.refreshTenantConcurrency), ("--refresh-batch-size", \.refreshBatchSize)] {
      if let n = try number(flag) {
        guard n >= 1, n <= 1000, n == n.rounded() else { throw UsageError(description: "\(flag) must be a whole number between 1 and 1000") }
        c[keyPath: path] = Int(n)
      }
    }
    if let n = try number("--keep-notifications-days") {
      guard n >= 0, n <= 36_500, n == n.rounded() else {
        throw UsageError(description: "--keep-notifications-days must be a whole number of days between 0 and 36500")
      }
      c.keepNotificationsDays = Int(n)
    }
    if let v = values["--cors-origin"] {
      for text in v.split(separator: ",", omittingEmptySubsequences: false) {
        let origin = try Self.corsOrigin(String(text))
        if !c.corsOrigins.contains(origin) { c.corsOrigins.append(origin) }
      }
    }
    if let v = values["--trusted-proxies"] {
      guard let networks = IPNetwork.list(v) else {
        throw UsageError(description: "--trusted-proxies must be CIDR ranges joined by ',' (127.0.0.1/32,10.0.0.0/8), not \"\(v)\"")
      }
      c.trustedProxies = networks.map(\.description)
    }
    if let v = values["--allow-private-webhooks"] {
      switch v.lowercased() {
      case "true", "1", "yes": c.allowPrivateWebhooks = true
      case "false", "0", "no", "": c.allowPrivateWebhooks = false
      default: throw UsageError(description: "--allow-private-webhooks takes no value (environment and config: true or false), not \"\(v)\"")
      }
    }
    if let v = values["--clock-url"] { c.clockURL = try Self.clockURL(v) }
    try c.parseLimits(number)
    return c
  }

  /// Checks a `--clock-url` value: an `http://` URL on a loopback address (`127.0.0.0/8`, `::1`,
  /// `localhost`). A clock that others can move would let them expire every subscription or
  /// replay deliveries at will, so a test clock stays on the machine.
  /// - Throws: ``UsageError`` for anything else.
  static func clockURL(_ text: String) throws(UsageError) -> String {
    guard let url = URL(string: text), url.scheme?.lowercased() == "http", let host = url.host?.lowercased(), !host.isEmpty
    else { throw UsageError(description: "--clock-url must be an http:// URL, not \"\(text)\"") }
    let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
    let octets = bare.split(separator: ".", omittingEmptySubsequences: false).map { UInt8($0) }
    let loopback = bare == "localhost" || bare == "::1" || (octets.count == 4 && !octets.contains(nil) && octets[0] == 127)
    guard loopback else {
      throw UsageError(
        description: "--clock-url must point at this machine (127.0.0.1, [::1] or localhost), not \"\(host)\": it is for tests only")
    }
    return text
  }

  /// Checks a `--cors-origin` value and returns it as browsers serialize origins (RFC 6454):
  /// `scheme://host[:port]`, scheme and host in lower case, no default port (80 for http, 443 for
  /// https), no path, query, user or trailing slash.
  /// - Throws: ``UsageError`` for anything else, `*` included.
  static func corsOrigin(_ text: String) throws(UsageError) -> String {
    func refuse(_ why: String) -> UsageError {
      UsageError(description: "--cors-origin \"\(text)\" \(why)")
    }
    if text == "*" || text == "null" {
      throw refuse("is not allowed: name each origin whose pages may call the API (scheme://host[:port])")
    }
    guard let separator = text.range(of: "://") else { throw refuse("is not an origin: expected scheme://host[:port]") }
    let scheme = text[..<separator.lowerBound].lowercased()
    guard let first = scheme.first, first.isLetter,
      scheme.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "+-.".contains($0)) })
    else { throw refuse("has no valid scheme") }
    var authority = text[separator.upperBound...]
    guard !authority.contains(where: { "/?#@ ".contains($0) }) else {
      throw refuse("is not an origin: no path, query, user or spaces (scheme://host[:port])")
    }
    var port: Int?
    if let colon = authority.lastIndex(of: ":"), !authority[colon...].contains("]") {
      guard let number = Int(authority[authority.index(after: colon)...]), (1...65535).contains(number) else {
        throw refuse("has an invalid port")
      }
      port = number
      authority = authority[..<colon]
    }
    let host = authority.lowercased()
    let isIPv6 = host.hasPrefix("[") && host.hasSuffix("]") && host.count > 2
    guard !host.isEmpty,
      isIPv6 || host.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "-.".contains($0)) })
    else { throw refuse("has an invalid host") }
    let defaultPort = ["http": 80, "https": 443][scheme]
    guard let port, port != defaultPort else { return "\(scheme)://\(host)" }
    return "\(scheme)://\(host):\(port)"
  }

  /// Reads the flags of the listener and process limits.
  private mutating func parseLimits(_ number: (String) throws(UsageError) -> Double?) throws(UsageError) {
    func whole(_ flag: String, _ range: ClosedRange<Double>) throws(UsageError) -> Int? {
      guard let n = try number(flag) else { return nil }
      guard range.contains(n), n == n.rounded() else {
        throw UsageError(description: "\(flag) must be a whole number between \(Int(range.lowerBound)) and \(Int(range.upperBound))")
      }
      return Int(n)
    }
    if let n = try number("--grpc-idle-timeout") { grpcIdleTimeout = n }
    if let n = try number("--grpc-handshake-timeout") {
      guard n > 0 else { throw UsageError(description: "--grpc-handshake-timeout must be positive") }
      grpcHandshakeTimeout = n
    }
    if let n = try number("--grpc-write-timeout") { grpcWriteTimeout = n }
    for (flag, path) in [
      ("--grpc-connection-request-buffer", \DaemonConfiguration.grpcConnectionRequestBuffer),
      ("--grpc-request-buffer", \.grpcRequestBuffer),
    ] {
      if let n = try number(flag) {
        // A whole message of the 4 MiB limit, with its 5-byte prefix, must fit.
        guard n >= Double((4 << 20) + 5), n <= Double(1 << 40), n == n.rounded() else {
          throw UsageError(description: "\(flag) must be a whole number of bytes, at least 4194309 (one 4 MiB message)")
        }
        self[keyPath: path] = Int(n)
      }
    }
    if let n = try whole("--reserved-descriptors", 16...1_000_000) { reservedDescriptors = n }
    if let n = try whole("--grpc-max-connections", 1...1_000_000) { grpcMaxConnections = n }
    if let n = try whole("--outbound-max-connections", 2...100_000) { outboundMaxConnections = n }
    if let n = try whole("--grpc-max-calls", 1...1_000_000) { grpcMaxCalls = n }
    if let n = try whole("--grpc-max-reply-bytes", 65536...1_099_511_627_776) { grpcMaxReplyBytes = n }
    if let n = try whole("--max-working-set-bytes", 0...1_099_511_627_776) {
      guard n == 0 || n >= 1 << 20 else {
        throw UsageError(description: "--max-working-set-bytes must be 0 (off) or at least 1048576 (1 MiB)")
      }
      maxWorkingSetBytes = n
    }
    if let n = try whole("--http-max-connections", 1...1_000_000) { httpMaxConnections = n }
    if let n = try whole("--http-max-connections-per-address", 1...1_000_000) { httpMaxConnectionsPerAddress = n }
    if let n = try number("--http-request-head-timeout") {
      guard n >= 0.1 else { throw UsageError(description: "--http-request-head-timeout must be at least 0.1 seconds") }
      httpRequestHeadTimeout = n
    }
    // At least one largest RPC body: a 4 MiB message in base64 (gRPC-Web text) with its envelope.
    if let n = try whole("--http-request-buffer", 6_000_000...1_099_511_627_776) { httpRequestBuffer = n }
    if let n = try number("--memory-trim-interval") { memoryTrimInterval = n }
    if let n = try whole("--history-cache-mb", 0...1_048_576) { historyCacheMB = n }
    if let n = try whole("--postgres-pool-size", 1...256) { postgresPoolSize = n }
    if let n = try whole("--max-webhooks-per-app", 1...100_000) { maxWebhooksPerApp = n }
    if let n = try whole("--max-webhooks-per-tenant", 1...1_000_000) { maxWebhooksPerTenant = n }
    if let n = try whole("--webhook-max-in-flight-per-tenant", 1...64) { webhookMaxInFlightPerTenant = n }
  }
}

/// How the process's descriptors are shared: a reserve for the store, outbound calls and the
/// runtime (libdispatch, logs), then 3/4 of the rest for gRPC connections and 1/4 for HTTP ones,
/// so that neither listener can bring the process near its open-files limit (where libdispatch
/// aborts the process when it cannot open `/proc/<tid>/stat`).
public struct DescriptorBudget: Sendable, Equatable {
  /// The gRPC connection cap.
  public var grpcConnections: Int
  /// The HTTP connection cap.
  public var httpConnections: Int

  /// Caps as given.
  public init(grpcConnections: Int, httpConnections: Int) {
    self.grpcConnections = grpcConnections
    self.httpConnections = httpConnections
  }

  /// The caps for an open-files limit, with the configured ones taking precedence.
  /// - Parameters:
  ///   - openFilesLimit: The soft RLIMIT_NOFILE in force.
  ///   - configuration: The reserve and any caps set by flags.
  public init(openFilesLimit: Int, configuration: DaemonConfiguration) {
    let available = max(32, openFilesLimit - configuration.reservedDescriptors)
    grpcConnections = configuration.grpcMaxConnections ?? min(4096, available * 3 / 4)
    httpConnections = configuration.httpMaxConnections ?? min(1024, available / 4)
  }

  /// Whether the caps with the reserve fit under the open-files limit.
  public func fits(openFilesLimit: Int, reserved: Int) -> Bool {
    grpcConnections + httpConnections + reserved <= openFilesLimit
  }
}

/// A `HOST:PORT` address (`[::1]:0` for IPv6).
public struct HostPort: Sendable, Equatable {
  /// The host, without brackets.
  public var host: String
  /// The port; 0 asks for a free one.
  public var port: Int

  /// Parses `HOST:PORT`.
  public init?(_ text: String) {
    guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (0...65535).contains(port) else { return nil }
    var host = String(text[..<colon])
    if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
    guard !host.isEmpty else { return nil }
    self.host = host
    self.port = port
  }
}
