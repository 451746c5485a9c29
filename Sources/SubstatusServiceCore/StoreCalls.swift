import RPCCore
import SubscriptionStorage

extension RPCError {
  /// Maps a store failure to a status: NOT_FOUND, ALREADY_EXISTS, INVALID_ARGUMENT, UNAVAILABLE,
  /// FAILED_PRECONDITION for unopenable secrets, INTERNAL for the rest (generic message).
  package init(store error: StoreError) {
    switch error.code {
    case .notFound: self.init(code: .notFound, message: error.message)
    case .alreadyExists: self.init(code: .alreadyExists, message: error.message)
    case .invalidArgument: self.init(code: .invalidArgument, message: error.message)
    case .resourceExhausted: self.init(code: .resourceExhausted, message: error.message)
    case .unavailable: self.init(code: .unavailable, message: "storage unavailable: \(error.message)")
    case .secretUnavailable:
      self.init(code: .failedPrecondition, message: "a stored secret cannot be opened: check the master key")
    default: self.init(code: .internal, message: "internal storage error")
    }
  }
}

/// Runs a store call, mapping its error to an RPC status.
package func stored<T>(_ body: () async throws(StoreError) -> T) async throws(RPCError) -> T {
  do { return try await body() } catch { throw RPCError(store: error) }
}
