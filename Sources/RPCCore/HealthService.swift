import Synchronization
public import SubstatusWire

/// `grpc.health.v1.Health`: reports whether the server, and each service, is serving.
///
/// `Check` answers from a status table (the empty service name is the server as a whole);
/// `Watch` is not supported and fails with `UNIMPLEMENTED`.
///
/// ```swift
/// let health = HealthService()
/// health.register(into: &router)
/// health.setStatus(.notServing, forService: "")   // e.g. when draining
/// ```
public final class HealthService: Sendable {
  /// A serving status, as in `grpc.health.v1.HealthCheckResponse.ServingStatus`.
  public typealias ServingStatus = Grpc_Health_V1_HealthCheckResponse.ServingStatus

  private let statuses: Mutex<[String: ServingStatus]>

  /// Creates the service with the server as a whole marked `SERVING`.
  public init() { statuses = Mutex(["": .serving]) }

  /// Sets the status of a service (`""` for the whole server).
  public func setStatus(_ status: ServingStatus, forService service: String) {
    statuses.withLock { $0[service] = status }
  }

  /// Marks every known service, and the server, `NOT_SERVING` (for a graceful shutdown).
  public func markAllNotServing() {
    statuses.withLock { table in
      for key in table.keys { table[key] = .notServing }
    }
  }

  /// The status for a `Check` of `service`.
  ///
  /// - Throws: ``RPCError`` `NOT_FOUND` for a service that has no status.
  public func check(service: String) throws(RPCError) -> ServingStatus {
    guard let status = statuses.withLock({ $0[service] }) else {
      throw RPCError(code: .notFound, message: "unknown service \(service)")
    }
    return status
  }

  /// Registers `Check` and `Watch`, and marks every service already in the router `SERVING`.
  public func register(into router: inout RPCRouter) {
    for service in router.serviceNames where statuses.withLock({ $0[service] == nil }) {
      setStatus(.serving, forService: service)
    }
    setStatus(.serving, forService: "grpc.health.v1.Health")
    router.registerUnary(
      method: "/grpc.health.v1.Health/Check", request: Grpc_Health_V1_HealthCheckRequest.self,
      response: Grpc_Health_V1_HealthCheckResponse.self
    ) { [self] request, _ in
      var response = Grpc_Health_V1_HealthCheckResponse()
      response.status = try check(service: request.service)
      return response
    }
    router.registerStreaming(method: "/grpc.health.v1.Health/Watch") { _, _, _ in
      throw RPCError(code: .unimplemented, message: "grpc.health.v1.Health/Watch is not supported; use Check")
    }
  }
}
