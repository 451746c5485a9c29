public import RPCCore
public import SubstatusClock
public import SubstatusWire

/// Options for one call of ``SubstatusClient``.
///
/// ```swift
/// let status = try await client.status(
///   appID: app, userID: "u1",
///   options: SubstatusCallOptions(timeout: .seconds(2), metadata: ["x-request-id": "r-42"]))
/// ```
public struct SubstatusCallOptions: Sendable {
  /// The deadline of the whole call, retries and backoffs included; `nil` uses the client's
  /// ``SubstatusClient/defaultTimeout``.
  public var timeout: Duration?
  /// Extra request metadata sent with every attempt (the client adds `authorization`).
  public var metadata: Metadata
  /// Overrides the client's retry policy for this call; `nil` keeps it. Retries still happen only
  /// for `UNAVAILABLE` on idempotent methods.
  public var retryPolicy: RetryPolicy?

  /// Creates options.
  ///
  /// - Parameters:
  ///   - timeout: The deadline of the whole call.
  ///   - metadata: Extra request metadata.
  ///   - retryPolicy: A retry policy for this call only.
  public init(timeout: Duration? = nil, metadata: Metadata = [:], retryPolicy: RetryPolicy? = nil) {
    self.timeout = timeout
    self.metadata = metadata
    self.retryPolicy = retryPolicy
  }
}

/// Whether repeating a call can change the outcome; decides whether ``SubstatusClient`` retries
/// it after `UNAVAILABLE`.
public enum Idempotency: Sendable, Hashable {
  /// As the RPC declares in its `.proto` (`option idempotency_level`, read from the generated
  /// `ProtoMethodOptions.idempotencyLevels`): retried when it is `NO_SIDE_EFFECTS` or `IDEMPOTENT`,
  /// never when it declares neither (or is not one of `Protos/`). The default.
  case declared
  /// Repeating the call is harmless, whatever the RPC declares.
  case idempotent
  /// Repeating the call may act twice (create a second key or tenant) or fail differently; never
  /// retried.
  case nonIdempotent
}

/// A client of one substatus server: typed async methods for every RPC of the API.
///
/// One client serves any number of concurrent calls. It sends `authorization: Bearer <apiKey>`
/// on every call but ``health(service:options:)``, applies a per-call deadline, and retries
/// `UNAVAILABLE` failures of idempotent methods with exponential backoff and jitter
/// (``RetryPolicy``). Failures throw `RPCError` with the server's status code and message.
///
/// Which calls are retried is what each RPC declares in its `.proto` (`option idempotency_level`,
/// docs/architecture.md "Method options"): every read (`NO_SIDE_EFFECTS`: gets, lists, checks,
/// reports, the offer signatures, whose retry signs again) and every write a repeat leaves as it is
/// (`IDEMPOTENT`: the ingest calls, deduplicated by transaction id; puts and sets that replace;
/// deletes, ``revokeApiKey(keyID:options:)``, ``disableTenant(tenantID:options:)``), and
/// ``health(service:options:)``. Never retried: ``createTenant(name:options:)``,
/// ``registerApp(bundleID:displayName:appleAppID:options:)``,
/// ``setSharedSecret(appID:sharedSecret:previousSecretOverlapSeconds:options:)`` (a repeat would end
/// the previous secret's overlap), ``createApiKey(role:appIDs:description:options:)``, and the
/// webhook calls that create, test or replay.
///
/// ```swift
/// let client = SubstatusClient(transport: transport, apiKey: readKey)
/// let answer = try await client.checkEligibility(
///   appID: "app_123", userID: "user-42", productIDs: ["pro.monthly", "pro.yearly"])
/// for product in answer.products {
///   print(product.productID, product.introductory?.eligible ?? false)
/// }
/// ```
public struct SubstatusClient: Sendable {
  /// The transport calls go over.
  public let transport: any ClientTransport
  /// The API key sent as `authorization: Bearer <key>`; `nil` sends none.
  public var apiKey: String?
  /// The deadline of unary calls whose options set none; `nil` waits indefinitely. Server-streaming
  /// calls (``watchEvents(appID:userID:types:sinceCursor:environment:options:)``) run until cancelled
  /// unless their options set a timeout.
  public var defaultTimeout: Duration?
  /// The retry policy of idempotent calls.
  public var retryPolicy: RetryPolicy
  /// The clock the deadlines are measured and the backoffs waited on.
  public var clock: any ServiceClock

  /// Creates a client over a transport.
  ///
  /// - Parameters:
  ///   - transport: Carries the calls, for example an HTTP/2 or an in-process transport.
  ///   - apiKey: The key to authenticate with; `nil` for health checks only.
  ///   - defaultTimeout: The deadline of calls that set none.
  ///   - retryPolicy: How idempotent calls are retried after `UNAVAILABLE`.
  ///   - clock: Measures deadlines and waits out backoffs (a `ManualClock` in tests).
  public init(
    transport: any ClientTransport, apiKey: String?, defaultTimeout: Duration? = nil,
    retryPolicy: RetryPolicy = .default, clock: any ServiceClock = SystemClock()
  ) {
    self.transport = transport
    self.apiKey = apiKey
    self.defaultTimeout = defaultTimeout
    self.retryPolicy = retryPolicy
    self.clock = clock
  }

  /// A generated client of any service whose calls get this client's policy: the API key, one
  /// deadline over all attempts and, for idempotent calls, retries of `UNAVAILABLE`.
  ///
  /// The typed methods of this client all go through here; use it for RPCs and fields they do not
  /// cover. A new RPC needs no code in this library:
  ///
  /// ```swift
  /// var request = Substatus_V1_ListProductsRequest()
  /// request.appID = app
  /// request.subscriptionGroupID = "pro"
  /// let page = try await client.service(Substatus_V1_AdminService.Client.self).listProducts(request)
  /// ```
  ///
  /// - Parameters:
  ///   - type: The generated client type, such as `Substatus_V1_StatusService.Client`.
  ///   - idempotency: Whether `UNAVAILABLE` may be retried: by default as each RPC declares
  ///     (``Idempotency/declared``).
  ///   - authenticated: Whether to send the API key.
  ///   - options: Deadline (per call, retries included), metadata and retry overrides.
  /// - Returns: The client. Its calls throw `RPCError` with the server's status, and
  ///   `DEADLINE_EXCEEDED` once the timeout passes.
  public func service<Client: RPCServiceClient>(
    _ type: Client.Type, idempotency: Idempotency = .declared, authenticated: Bool = true,
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) -> Client {
    Client(transport: SubstatusCallTransport(
      client: self, idempotency: idempotency, authenticated: authenticated, options: options))
  }

  /// Calls any unary method of the API with a complete request message, as
  /// ``service(_:idempotency:authenticated:options:)`` does through a generated client.
  ///
  /// ```swift
  /// var request = Substatus_V1_ListProductsRequest()
  /// request.appID = app
  /// request.subscriptionGroupID = "pro"
  /// let page = try await client.call(Substatus_V1_AdminService.listProducts, request)
  /// ```
  ///
  /// - Parameters:
  ///   - method: The method's descriptor, such as `Substatus_V1_StatusService.getStatus`.
  ///   - request: The request message.
  ///   - idempotency: Whether `UNAVAILABLE` may be retried: by default as the RPC declares
  ///     (`method.idempotencyLevel`).
  ///   - authenticated: Whether to send the API key.
  ///   - options: Deadline, metadata and retry overrides.
  /// - Returns: The decoded response.
  /// - Throws: `RPCError` with the server's status; `DEADLINE_EXCEEDED` once the timeout passes,
  ///   `INTERNAL` for a response that does not decode.
  public func call<Request: ProtobufMessage, Response: ProtobufMessage>(
    _ method: ProtoMethodDescriptor<Request, Response>, _ request: Request,
    idempotency: Idempotency = .declared, authenticated: Bool = true,
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Response {
    let transport = SubstatusCallTransport(
      client: self, idempotency: idempotency, authenticated: authenticated, options: options)
    return try await RPCClient(transport: transport).unary(method: method.path, request: request, response: Response.self)
  }
}

/// The transport under the generated clients of a ``SubstatusClient``: adds the API key and the
/// call's metadata, keeps one deadline over all attempts of a call, and retries `UNAVAILABLE`
/// failures of idempotent calls (``Idempotency``) with the client's backoff (a server-streaming
/// call only until its response headers arrive: once messages flow, the call is not repeated).
struct SubstatusCallTransport: ClientTransport {
  let client: SubstatusClient
  let idempotency: Idempotency
  let authenticated: Bool
  let options: SubstatusCallOptions

  func unary(method: String, request: [UInt8], metadata: Metadata, options callOptions: CallOptions)
    async throws(RPCError) -> ClientResponse
  {
    try await withPolicy(method: method, metadata: metadata, options: callOptions) { metadata, options throws(RPCError) in
      try await client.transport.unary(method: method, request: request, metadata: metadata, options: options)
    }
  }

  func serverStreaming(method: String, request: [UInt8], metadata: Metadata, options callOptions: CallOptions)
    async throws(RPCError) -> ClientResponseStream
  {
    // A stream (a watch) runs until it is cancelled: the client's default deadline, meant for
    // unary calls, does not apply; a timeout set in the call's options does.
    try await withPolicy(method: method, metadata: metadata, options: callOptions, defaultTimeout: false) {
      metadata, options throws(RPCError) in
      try await client.transport.serverStreaming(method: method, request: request, metadata: metadata, options: options)
    }
  }

  /// Whether a failed call of `method` (a full path) may be repeated: as `idempotency` says, or,
  /// for ``Idempotency/declared``, when the RPC declares `NO_SIDE_EFFECTS` or `IDEMPOTENT`.
  static func retries(_ method: String, _ idempotency: Idempotency) -> Bool {
    switch idempotency {
    case .idempotent: true
    case .nonIdempotent: false
    case .declared: ProtoMethodOptions.idempotencyLevels[method]?.isIdempotent ?? false
    }
  }

  /// Runs the attempts of one call with the policy's metadata, deadline and retries
  /// (`defaultTimeout`: whether the client's ``SubstatusClient/defaultTimeout`` applies).
  private func withPolicy<Result>(
    method: String, metadata: Metadata, options callOptions: CallOptions, defaultTimeout: Bool = true,
    _ attempt: (Metadata, CallOptions) async throws(RPCError) -> Result
  ) async throws(RPCError) -> Result {
    var metadata = metadata
    metadata.add(contentsOf: options.metadata)
    if authenticated, let apiKey = client.apiKey {
      metadata.removeAll(forKey: "authorization")
      metadata.addString("Bearer \(apiKey)", forKey: "authorization")
    }
    let policy = Self.retries(method, idempotency) ? (options.retryPolicy ?? client.retryPolicy) : .none
    let clock = client.clock
    let timeout = [options.timeout ?? (defaultTimeout ? client.defaultTimeout : nil), callOptions.timeout]
      .compactMap { $0 }.min()
    let deadline = timeout.map { clock.monotonicNow + $0 }
    var attempts = 1
    while true {
      var attemptOptions = callOptions
      if let deadline {
        let remaining = deadline - clock.monotonicNow
        guard remaining > .zero else {
          throw RPCError(code: .deadlineExceeded, message: "deadline exceeded before \(method.split(separator: "/").last ?? "")")
        }
        attemptOptions.timeout = remaining
      }
      do throws(RPCError) {
        return try await attempt(metadata, attemptOptions)
      } catch {
        guard RetryPolicy.isRetryable(error.code), attempts < policy.maximumAttempts else { throw error }
        let wait = policy.backoff(beforeRetry: attempts, random: Double.random(in: 0...1))
        if let deadline, clock.monotonicNow + wait >= deadline { throw error }
        do {
          try await clock.sleep(for: wait)
        } catch {
          throw RPCError(code: .cancelled, message: "the call was cancelled", cause: error)
        }
        attempts += 1
      }
    }
  }
}
