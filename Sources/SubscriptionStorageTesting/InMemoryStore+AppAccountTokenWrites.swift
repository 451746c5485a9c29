import SubscriptionDomain
import SubscriptionStorage

extension InMemoryStore {
  private static func key(_ w: AppAccountTokenWrite) -> [String] {
    [w.appId, w.environment.rawValue, w.originalTransactionId]
  }

  /// See ``AppAccountTokenWriteStore/claimDueAppAccountTokenWrites(atMs:limit:leaseUntilMs:)``.
  public func claimDueAppAccountTokenWrites(atMs: Int64, limit: Int, leaseUntilMs: Int64) async throws(StoreError)
    -> [AppAccountTokenWrite]
  {
    state.withLock { s in
      let due = s.appAccountTokenWrites.values.filter { $0.nextAttemptMs.map { $0 <= atMs } == true }
        .sorted {
          ($0.nextAttemptMs ?? 0, $0.appId, $0.environment.rawValue, $0.originalTransactionId)
            < ($1.nextAttemptMs ?? 0, $1.appId, $1.environment.rawValue, $1.originalTransactionId)
        }
        .prefix(max(1, limit))
      return due.map { write in
        var claimed = write
        claimed.nextAttemptMs = leaseUntilMs
        s.appAccountTokenWrites[Self.key(write)] = claimed
        return write
      }
    }
  }

  /// See ``AppAccountTokenWriteStore/nextAppAccountTokenWriteDueMs()``.
  public func nextAppAccountTokenWriteDueMs() async throws(StoreError) -> Int64? {
    state.withLock { s in s.appAccountTokenWrites.values.compactMap(\.nextAttemptMs).min() }
  }

  /// See ``AppAccountTokenWriteStore/finishAppAccountTokenWrite(_:givenUpDetail:releaseAtMs:)``.
  public func finishAppAccountTokenWrite(_ write: AppAccountTokenWrite, givenUpDetail: String?, releaseAtMs: Int64)
    async throws(StoreError) -> Bool
  {
    state.withLock { s in
      let key = Self.key(write)
      guard var row = s.appAccountTokenWrites[key] else { return false }
      guard row.userId == write.userId else {
        if row.nextAttemptMs != nil { row.nextAttemptMs = releaseAtMs }
        s.appAccountTokenWrites[key] = row
        return false
      }
      if let givenUpDetail {
        row.nextAttemptMs = nil
        row.detail = givenUpDetail
        row.attempts = write.attempts
        s.appAccountTokenWrites[key] = row
      } else {
        s.appAccountTokenWrites[key] = nil
      }
      return true
    }
  }

  /// See ``AppAccountTokenWriteStore/rescheduleAppAccountTokenWrite(_:attempts:nextAttemptMs:detail:)``.
  public func rescheduleAppAccountTokenWrite(
    _ write: AppAccountTokenWrite, attempts: Int, nextAttemptMs: Int64, detail: String
  ) async throws(StoreError) -> Bool {
    state.withLock { s in
      let key = Self.key(write)
      guard var row = s.appAccountTokenWrites[key] else { return false }
      let same = row.userId == write.userId
      if same {
        row.attempts = attempts
        row.detail = detail
        row.nextAttemptMs = nextAttemptMs
      } else if row.nextAttemptMs != nil {
        row.nextAttemptMs = nextAttemptMs
      }
      s.appAccountTokenWrites[key] = row
      return same
    }
  }

  /// See ``AppAccountTokenWriteStore/appAccountTokenWrite(appId:environment:originalTransactionId:)``.
  public func appAccountTokenWrite(appId: String, environment: Environment, originalTransactionId: String)
    async throws(StoreError) -> AppAccountTokenWrite?
  {
    state.withLock { $0.appAccountTokenWrites[[appId, environment.rawValue, originalTransactionId]] }
  }
}
