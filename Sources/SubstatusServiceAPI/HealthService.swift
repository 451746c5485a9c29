public import RPCCore
import Synchronization
public import SubstatusWire

/// `grpc.health.v1.Health`: reports whether the server, and each service, is serving.
///
/// `Check` answers from a status table (the empty service name is the server as a whole); a
/// service without a status is `NOT_FOUND`. `Watch` sends the current status at once (for a
/// service without one, `SERVICE_UNKNOWN`), then each change, until the caller ends the call, as
/// `health.proto` says.
///
/// ```swift
/// let health = HealthService()
/// health.register(into: &router)
/// health.setStatus(.notServing, forService: "")   // e.g. when draining
/// ```
public final class HealthService: Grpc_Health_V1_Health.ServiceProtocol {
  /// A serving status, as in `grpc.health.v1.HealthCheckResponse.ServingStatus`.
  public typealias ServingStatus = Grpc_Health_V1_HealthCheckResponse.ServingStatus

  private struct Watcher {
    var service: String
    var continuation: AsyncStream<ServingStatus>.Continuation
  }

  private struct State {
    var statuses: [String: ServingStatus] = ["": .serving]
    var watchers: [Int: Watcher] = [:]
    var nextWatcher = 0

    /// Sets statuses and returns the watchers to tell, with what to tell them.
    mutating func set(_ changes: [String: ServingStatus]) -> [(AsyncStream<ServingStatus>.Continuation, ServingStatus)] {
      statuses.merge(changes) { $1 }
      return watchers.values.compactMap { watcher in changes[watcher.service].map { (watcher.continuation, $0) } }
    }
  }

  private let state = Mutex(State())

  /// Creates the service with the server as a whole marked `SERVING`.
  public init() {}

  /// Sets the status of a service (`""` for the whole server); its watchers are sent the change.
  ///
  /// - Parameters:
  ///   - status: The new status.
  ///   - service: A fully qualified service name, or `""`.
  public func setStatus(_ status: ServingStatus, forService service: String) {
    for (watcher, status) in state.withLock({ $0.set([service: status]) }) { watcher.yield(status) }
  }

  /// Marks every known service, and the server, `NOT_SERVING` (for a graceful shutdown); their
  /// watchers are sent the change.
  public func markAllNotServing() {
    let told = state.withLock { state in
      state.set(Dictionary(uniqueKeysWithValues: state.statuses.keys.map { ($0, ServingStatus.notServing) }))
    }
    for (watcher, status) in told { watcher.yield(status) }
  }

  /// The status for a `Check` of `service`.
  ///
  /// - Parameter service: A fully qualified service name, or `""` for the server.
  /// - Throws: ``RPCError`` `NOT_FOUND` for a service that has no status.
  public func check(service: String) throws(RPCError) -> ServingStatus {
    guard let status = state.withLock({ $0.statuses[service] }) else {
      throw RPCError(code: .notFound, message: "unknown service \(service)")
    }
    return status
  }

  /// Registers `Check` and `Watch`, and marks every service already in the router `SERVING`.
  ///
  /// - Parameter router: The router; register the other services first.
  public func register(into router: inout RPCRouter) {
    var services = router.serviceNames
    services.append(Grpc_Health_V1_Health.name)
    state.withLock { state in
      for service in services where state.statuses[service] == nil { state.statuses[service] = .serving }
    }
    Grpc_Health_V1_Health.register(self, in: &router)
  }

  /// `Check`: the status of the requested service.
  ///
  /// - Parameters:
  ///   - request: Names the service; empty for the server as a whole.
  ///   - context: The call's context.
  /// - Returns: The status.
  /// - Throws: ``RPCError`` `NOT_FOUND` for a service that has no status.
  public func check(
    _ request: Grpc_Health_V1_HealthCheckRequest, _ context: ServerContext
  ) async throws -> Grpc_Health_V1_HealthCheckResponse {
    var response = Grpc_Health_V1_HealthCheckResponse()
    response.status = try check(service: request.service)
    return response
  }

  /// `Watch`: the service's status at once (`SERVICE_UNKNOWN` when it has none; the call stays
  /// open), then every change, until the caller ends the call or the server stops it.
  ///
  /// - Parameters:
  ///   - request: Names the service; empty for the server as a whole.
  ///   - responses: Where the statuses go.
  ///   - context: The call's context.
  public func watch(
    _ request: Grpc_Health_V1_HealthCheckRequest, _ responses: RPCMessageWriter<Grpc_Health_V1_HealthCheckResponse>,
    _ context: ServerContext
  ) async throws {
    // Only the newest status matters to a watcher that has not caught up (grpc-go does the same).
    let (changes, continuation) = AsyncStream.makeStream(of: ServingStatus.self, bufferingPolicy: .bufferingNewest(1))
    let id = state.withLock { state in
      let id = state.nextWatcher
      state.nextWatcher += 1
      state.watchers[id] = Watcher(service: request.service, continuation: continuation)
      continuation.yield(state.statuses[request.service] ?? .serviceUnknown)
      return id
    }
    continuation.onTermination = { [weak self] _ in
      _ = self?.state.withLock { $0.watchers.removeValue(forKey: id) }
    }
    defer { continuation.finish() }
    var last: ServingStatus?
    // Ends when the call's task is cancelled: the caller went away or the deadline passed.
    for await status in changes where status != last {
      var response = Grpc_Health_V1_HealthCheckResponse()
      response.status = status
      responses.write(response)
      last = status
    }
  }
}
