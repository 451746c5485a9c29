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
  /// Repeating the call is harmless: reads, and the ingest calls (deduplicated by transaction id).
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
/// Idempotent (retried on `UNAVAILABLE`): every read — ``getApp(appID:options:)``,
/// ``listApps(pageSize:pageToken:options:)``, ``listProducts(appID:subscriptionGroupID:pageSize:pageToken:options:)``,
/// ``listApiKeys(showRevoked:pageSize:pageToken:options:)``, ``listTenants(pageSize:pageToken:options:)``,
/// ``checkEligibility(appID:queries:asOf:environment:options:)``, ``status(appID:userID:asOf:environment:options:)``,
/// ``entitlements(appID:userID:asOf:environment:options:)``,
/// ``transactionHistory(appID:userID:environment:pageSize:pageToken:options:)``,
/// ``report(appID:asOf:environment:options:)``, ``health(service:options:)``, the offer signatures
/// ``signPromotionalOffer(appID:userID:productID:offerID:appAccountToken:nonce:transactionID:environment:options:)``
/// and ``signIntroductoryOfferEligibility(appID:userID:productID:transactionID:nonce:environment:options:)``
/// (a retry signs again) — and the ingest
/// calls ``submitReceipt(appID:userID:receiptData:excludeOldTransactions:options:)``,
/// ``importReceiptResponse(appID:userID:json:options:)`` and
/// ``importTransactions(appID:userID:transactions:renewalInfos:options:)``, which the API
/// documents as idempotent. Never retried: ``createTenant(name:options:)``,
/// ``disableTenant(tenantID:options:)``, ``registerApp(bundleID:displayName:appleAppID:options:)``,
/// ``setSharedSecret(appID:sharedSecret:previousSecretOverlapSeconds:options:)``,
/// ``setInAppPurchaseKey(appID:issuerID:keyID:privateKeyPEM:options:)``,
/// ``putProducts(appID:products:options:)``, ``setPolicy(appID:policy:updateMask:options:)``,
/// ``createApiKey(role:appIDs:description:options:)`` and ``revokeApiKey(keyID:options:)``.
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
  /// let page = try await client.service(Substatus_V1_AdminService.Client.self, idempotency: .idempotent)
  ///   .listProducts(request)
  /// ```
  ///
  /// - Parameters:
  ///   - type: The generated client type, such as `Substatus_V1_StatusService.Client`.
  ///   - idempotency: Whether `UNAVAILABLE` may be retried; `.nonIdempotent` unless you know better.
  ///   - authenticated: Whether to send the API key.
  ///   - options: Deadline (per call, retries included), metadata and retry overrides.
  /// - Returns: The client. Its calls throw `RPCError` with the server's status, and
  ///   `DEADLINE_EXCEEDED` once the timeout passes.
  public func service<Client: RPCServiceClient>(
    _ type: Client.Type, idempotency: Idempotency = .nonIdempotent, authenticated: Bool = true,
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
  /// let page = try await client.call(
  ///   Substatus_V1_AdminService.listProducts, request, idempotency: .idempotent)
  /// ```
  ///
  /// - Parameters:
  ///   - method: The method's descriptor, such as `Substatus_V1_StatusService.getStatus`.
  ///   - request: The request message.
  ///   - idempotency: Whether `UNAVAILABLE` may be retried.
  ///   - authenticated: Whether to send the API key.
  ///   - options: Deadline, metadata and retry overrides.
  /// - Returns: The decoded response.
  /// - Throws: `RPCError` with the server's status; `DEADLINE_EXCEEDED` once the timeout passes,
  ///   `INTERNAL` for a response that does not decode.
  public func call<Request: ProtobufMessage, Response: ProtobufMessage>(
    _ method: ProtoMethodDescriptor<Request, Response>, _ request: Request,
    idempotency: Idempotency, authenticated: Bool = true,
    options: SubstatusCallOptions = SubstatusCallOptions()
  ) async throws(RPCError) -> Response {
    let transport = SubstatusCallTransport(
      client: self, idempotency: idempotency, authenticated: authenticated, options: options)
    return try await RPCClient(transport: transport).unary(method: method.path, request: request, response: Response.self)
  }
}

/// The transport under the generated clients of a ``SubstatusClient``: adds the API key and the
/// call's metadata, keeps one deadline over all attempts of a call, and retries `UNAVAILABLE`
/// failures of idempotent calls with the client's backoff (a server-streaming call only until its
/// response headers arrive: once messages flow, the call is not repeated).
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
    let policy = idempotency == .idempotent ? (options.retryPolicy ?? client.retryPolicy) : .none
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
