import Synchronization
import SubstatusMetrics

// Outbound HTTP(S) on libcurl's multi interface: webhooks, Apple's verifyReceipt and Server API, the
// App Store simulator's notifications. One thread per client drives every transfer
// (`CurlLoop.swift`); each request carries its own limits, so nothing is set for the whole process
// (no proxy from the environment, ever).

/// An IP address the client is about to connect to, as the address policy sees it.
public struct OutboundAddress: Sendable, Hashable {
  /// The address: 4 bytes (IPv4) or 16 (IPv6), network order.
  public var bytes: [UInt8]
  /// The TCP port.
  public var port: Int

  /// Creates an address.
  public init(bytes: [UInt8], port: Int) {
    self.bytes = bytes
    self.port = port
  }
}

/// Decides, at connect time, whether an address may be connected to: `nil` allows it; a reason
/// refuses it (the connection is not opened and the next address of the name is tried).
///
/// Called on the client's loop thread for every address of every connection, redirects included:
/// keep it quick and free of I/O.
public typealias OutboundAddressPolicy = @Sendable (OutboundAddress) -> String?

/// One HTTP request and its limits.
///
/// ```swift
/// var request = OutboundRequest(method: .post, url: "https://hooks.example.com/x", body: Array(json.utf8))
/// request.headers = [("Content-Type", "application/json")]
/// request.timeout = .seconds(10)
/// request.maxResponseBytes = 4096
/// let response = try await client.send(request)
/// ```
public struct OutboundRequest: Sendable {
  /// The request method.
  public struct Method: Sendable, Hashable {
    let name: String
    /// `GET`.
    public static let get = Method(name: "GET")
    /// `POST` (with ``OutboundRequest/body``).
    public static let post = Method(name: "POST")
    /// `PUT` (with ``OutboundRequest/body``), as the App Store Server API's Set App Account Token
    /// and Send Consumption Information take.
    public static let put = Method(name: "PUT")
    /// Whether the method sends ``OutboundRequest/body``.
    var hasBody: Bool { self != .get }
  }

  /// `GET`, `POST` or `PUT`.
  public var method: Method
  /// The URL: `http://` or `https://` only.
  public var url: String
  /// Request headers, sent as given (no `Expect: 100-continue` is added).
  public var headers: [(String, String)]
  /// The body, for `POST` and `PUT`.
  public var body: [UInt8]
  /// The total deadline: from the call to the last byte of the answer, whatever the receiver does
  /// (waiting for a connection slot, DNS, connecting, TLS, sending, a trickled answer).
  public var timeout: Duration
  /// The most time to open a connection (DNS, TCP and TLS), within ``timeout``.
  public var connectTimeout: Duration
  /// The answer's body is read up to this many bytes: a `Content-Length` above it is refused before
  /// any byte of the body is read, and a body that grows past it is cut there; the connection is
  /// closed either way and the answer has ``OutboundResponse/truncated`` set.
  public var maxResponseBytes: Int
  /// Redirects followed (`http` and `https` only, each connection checked by the policy); 0: the
  /// 3xx is the answer.
  public var maxRedirects: Int
  /// A transfer slower than `bytesPerSecond` for `period` ends as a timeout; `nil`: no such limit.
  public var lowSpeedLimit: (bytesPerSecond: Int, period: Duration)?
  /// Checks every address before it is connected to; `nil` allows all.
  public var addressPolicy: OutboundAddressPolicy?
  /// Addresses to use for a host and port instead of the DNS's, as `host:port:address[,address…]`
  /// (libcurl's `CURLOPT_RESOLVE`); each is still checked by ``addressPolicy``.
  public var addressOverrides: [String]
  /// Response header fields to return in ``OutboundResponse/headers`` (names matched without
  /// regard to case; the first value of a repeated field), e.g. `Retry-After`.
  public var responseHeaders: [String] = []

  /// Creates a request with the defaults: 10 s in all, 5 s to connect, 1 MiB of answer, no
  /// redirect, at least 1 byte a second over 30 s, no address policy.
  public init(method: Method, url: String, headers: [(String, String)] = [], body: [UInt8] = []) {
    self.method = method
    self.url = url
    self.headers = headers
    self.body = body
    self.timeout = .seconds(10)
    self.connectTimeout = .seconds(5)
    self.maxResponseBytes = 1 << 20
    self.maxRedirects = 0
    self.lowSpeedLimit = (1, .seconds(30))
    self.addressPolicy = nil
    self.addressOverrides = []
  }
}

/// An answer.
public struct OutboundResponse: Sendable {
  /// The HTTP status code.
  public var status: Int
  /// The body, at most the request's ``OutboundRequest/maxResponseBytes``.
  public var body: [UInt8]
  /// Whether the body was longer than the limit (announced or sent): ``body`` holds what was read
  /// before the cut (nothing when the `Content-Length` announced too much).
  public var truncated: Bool
  /// From the call to the end of the answer.
  public var duration: Duration
  /// The values of the request's ``OutboundRequest/responseHeaders`` the answer had, by the
  /// names as requested.
  public var headers: [String: String] = [:]
}

/// Why a request has no answer.
public struct OutboundHTTPError: Error, Sendable, CustomStringConvertible {
  /// The kind of failure; a struct over a private enum, so adding kinds breaks no caller.
  public struct Code: Sendable, Hashable, CustomStringConvertible {
    fileprivate enum Value: String, CaseIterable {
      case timeout, tooLarge = "too_large", addressRefused = "address_refused", resolveFailed = "resolve_failed"
      case connectFailed = "connect_failed", tlsFailed = "tls_failed", connectionLost = "connection_lost"
      case invalidRequest = "invalid_request", cancelled, other
    }
    fileprivate let value: Value
    fileprivate init(_ value: Value) { self.value = value }
    /// The total deadline (or the low-speed limit) passed.
    public static let timeout = Code(.timeout)
    /// The answer's body passed the limit before its status was known.
    public static let tooLarge = Code(.tooLarge)
    /// Every address of the host was refused by the address policy.
    public static let addressRefused = Code(.addressRefused)
    /// The host's name did not resolve.
    public static let resolveFailed = Code(.resolveFailed)
    /// No address accepted the connection.
    public static let connectFailed = Code(.connectFailed)
    /// The TLS handshake failed or the certificate was not trusted.
    public static let tlsFailed = Code(.tlsFailed)
    /// The connection closed or broke before a whole answer.
    public static let connectionLost = Code(.connectionLost)
    /// The URL or the request cannot be sent (not http(s), malformed).
    public static let invalidRequest = Code(.invalidRequest)
    /// The caller was cancelled, or the client shut down.
    public static let cancelled = Code(.cancelled)
    /// Anything else (a malformed answer, too many redirects…).
    public static let other = Code(.other)
    /// The code's name, as in the metrics' `outcome` label.
    public var description: String { value.rawValue }
  }

  /// The kind of failure.
  public var code: Code
  /// What happened, for people (libcurl's message, or the policy's reason for a refused address).
  public var message: String

  /// Creates an error.
  public init(code: Code, message: String) {
    self.code = code
    self.message = message
  }

  /// The message.
  public var description: String { message }
}

/// The client's counters, for `/metrics`.
public struct OutboundHTTPMetrics: Sendable {
  /// Sockets open now (pooled idle connections included).
  public var connectionsOpen: Int
  /// The cap on connections open at once.
  public var connectionLimit: Int
  /// Requests in flight.
  public var inFlight: Int
  /// Requests ended, by outcome (`ok`, and the ``OutboundHTTPError/Code`` names).
  public var requests: [String: Int]

  /// The metric families of several clients' counters (`substatus_outbound_*`), each series
  /// labelled with its pool's name (`pool="webhooks"`).
  public static func metricFamilies(pools: [(name: String, metrics: OutboundHTTPMetrics)]) -> [MetricFamily] {
    func gauge(_ name: String, _ help: String, _ value: (OutboundHTTPMetrics) -> Int) -> MetricFamily {
      MetricFamily(
        name: name, help: help, type: .gauge,
        samples: pools.map { .value([("pool", $0.name)], .integer(value($0.metrics))) })
    }
    return [
      gauge(
        "substatus_outbound_connections_open", "Outbound HTTP connections open (idle pooled ones included).",
        \.connectionsOpen),
      gauge(
        "substatus_outbound_connections_limit",
        "The cap on outbound HTTP connections (--outbound-max-connections, shared by the pools).", \.connectionLimit),
      gauge("substatus_outbound_requests_in_flight", "Outbound HTTP requests in flight.", \.inFlight),
      MetricFamily(
        name: "substatus_outbound_requests_total", help: "Outbound HTTP requests ended, by outcome.", type: .counter,
        samples: pools.flatMap { name, m in
          m.requests.keys.sorted().map { .value([("pool", name), ("outcome", $0)], .integer(m.requests[$0] ?? 0)) }
        }),
    ]
  }

  /// ``metricFamilies(pools:)`` in the Prometheus text format.
  public static func prometheusText(pools: [(name: String, metrics: OutboundHTTPMetrics)]) -> String {
    PrometheusText.render(metricFamilies(pools: pools))
  }
}

/// Outbound HTTP/1.1 on libcurl's multi interface, driven by one thread of its own.
///
/// Every request has a total deadline (enforced by libcurl and again by the loop), a connect
/// timeout, a low-speed limit and a body limit applied where the bytes are read; its addresses are
/// checked at connect time by its ``OutboundAddressPolicy`` (IPv6 and IPv4, every address of the
/// name in turn); TLS is verified (the system's roots, plus ``Configuration-swift.struct/caFile``).
/// No proxy is ever used, whatever the environment says. Connections are kept alive and reused,
/// under a global cap and a per-host cap; requests over a cap wait for a connection (within their
/// deadline). A cancelled caller's transfer is removed on the loop thread at once and its
/// connection closed.
///
/// ```swift
/// let client = OutboundHTTPClient(configuration: .init(maxConnections: 64))
/// let answer = try await client.send(OutboundRequest(method: .get, url: "http://127.0.0.1:8080/"))
/// client.shutdown()
/// ```
public final class OutboundHTTPClient: Sendable {
  /// The client's settings.
  public struct Configuration: Sendable {
    /// Connections open at once, over all hosts (idle pooled ones included).
    public var maxConnections: Int
    /// Connections open at once to one host and port.
    public var maxConnectionsPerHost: Int
    /// A PEM file of certificates trusted besides the system's (`--outbound-ca-file`).
    public var caFile: String?

    /// Creates a configuration.
    public init(maxConnections: Int = 64, maxConnectionsPerHost: Int = 16, caFile: String? = nil) {
      self.maxConnections = max(1, maxConnections)
      self.maxConnectionsPerHost = max(1, min(maxConnectionsPerHost, self.maxConnections))
      self.caFile = caFile
    }
  }

  /// The settings.
  public let configuration: Configuration
  private let loop: CurlLoop

  /// A client for callers that were given none (tests, tools): 64 connections, no extra CA.
  /// `substatusd` makes its own from its flags and passes it everywhere.
  public static let shared = OutboundHTTPClient()

  /// Creates a client and starts its loop thread.
  public init(configuration: Configuration = .init()) {
    self.configuration = configuration
    self.loop = CurlLoop(configuration: configuration)
  }

  deinit { loop.stop() }

  /// Sends a request and returns its answer.
  ///
  /// A cancelled caller throws ``OutboundHTTPError`` `cancelled` at once; its transfer is removed
  /// and its connection closed on the loop thread.
  /// - Throws: ``OutboundHTTPError``.
  public func send(_ request: OutboundRequest) async throws(OutboundHTTPError) -> OutboundResponse {
    let result: Result<OutboundResponse, OutboundHTTPError> = await loop.perform(request)
    return try result.get()
  }

  /// The counters now.
  public var metrics: OutboundHTTPMetrics { loop.metrics() }

  /// Ends every transfer (their callers get `cancelled`), closes every connection and ends the
  /// loop thread; later requests fail with `cancelled`. Returns once the loop has ended.
  public func shutdown() { loop.stop() }
}

extension OutboundHTTPError.Code {
  /// Every outcome label of ``OutboundHTTPMetrics/requests``, `ok` first.
  static var allLabels: [String] { ["ok"] + Value.allCases.map(\.rawValue) }
}
