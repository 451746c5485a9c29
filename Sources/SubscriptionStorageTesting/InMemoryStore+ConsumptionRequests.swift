import SubscriptionDomain
import SubscriptionStorage

extension InMemoryStore {
  /// See ``ConsumptionRequestStore/recordConsumptionRequest(_:)``.
  public func recordConsumptionRequest(_ request: ConsumptionRequest) async throws(StoreError) -> Bool {
    try StoreValidation.validate(request)
    return try withState { (s: inout State) throws(StoreError) in
      guard s.apps[request.appId] != nil else { throw StoreError.notFound("app", request.appId) }
      let key = [request.appId, request.notificationId]
      guard s.consumptionRequests[key] == nil else { return false }
      s.consumptionRequests[key] = request
      return true
    }
  }

  /// See ``ConsumptionRequestStore/claimDueConsumptionRequests(atMs:limit:leaseUntilMs:)``.
  public func claimDueConsumptionRequests(atMs: Int64, limit: Int, leaseUntilMs: Int64) async throws(StoreError)
    -> [ConsumptionRequest]
  {
    state.withLock { s in
      let due = s.consumptionRequests.values.filter { $0.nextAttemptMs.map { $0 <= atMs } == true }
        .sorted { ($0.nextAttemptMs ?? 0, $0.appId, $0.notificationId) < ($1.nextAttemptMs ?? 0, $1.appId, $1.notificationId) }
        .prefix(max(1, limit))
      return due.map { request in
        var claimed = request
        claimed.nextAttemptMs = leaseUntilMs
        s.consumptionRequests[[request.appId, request.notificationId]] = claimed
        return request
      }
    }
  }

  /// See ``ConsumptionRequestStore/nextConsumptionRequestDueMs()``.
  public func nextConsumptionRequestDueMs() async throws(StoreError) -> Int64? {
    state.withLock { s in s.consumptionRequests.values.compactMap(\.nextAttemptMs).min() }
  }

  /// See ``ConsumptionRequestStore/rescheduleConsumptionRequest(appId:notificationId:attempts:nextAttemptMs:detail:)``.
  public func rescheduleConsumptionRequest(
    appId: String, notificationId: String, attempts: Int, nextAttemptMs: Int64, detail: String
  ) async throws(StoreError) {
    try withState { (s: inout State) throws(StoreError) in
      let key = [appId, notificationId]
      guard var request = s.consumptionRequests[key], request.outcome == nil else {
        throw StoreError.notFound("open consumption request", notificationId)
      }
      request.attempts = attempts
      request.nextAttemptMs = nextAttemptMs
      request.detail = detail
      s.consumptionRequests[key] = request
    }
  }

  /// See ``ConsumptionRequestStore/closeConsumptionRequest(appId:notificationId:attempts:outcome:detail:events:)``.
  public func closeConsumptionRequest(
    appId: String, notificationId: String, attempts: Int, outcome: ConsumptionRequestOutcome, detail: String?,
    events: [SubscriptionEvent]
  ) async throws(StoreError) -> [LoggedEvent] {
    try withState { (s: inout State) throws(StoreError) in
      let key = [appId, notificationId]
      guard var request = s.consumptionRequests[key], request.outcome == nil else {
        throw StoreError.notFound("open consumption request", notificationId)
      }
      for e in events where s.apps[e.appId] == nil { throw StoreError.notFound("app", e.appId) }
      request.attempts = attempts
      request.nextAttemptMs = nil
      request.outcome = outcome
      request.detail = detail
      s.consumptionRequests[key] = request
      return s.eventLog.append(events)
    }
  }

  /// See ``ConsumptionRequestStore/consumptionRequest(appId:notificationId:)``.
  public func consumptionRequest(appId: String, notificationId: String) async throws(StoreError) -> ConsumptionRequest? {
    state.withLock { $0.consumptionRequests[[appId, notificationId]] }
  }
}
