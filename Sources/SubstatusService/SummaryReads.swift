// The read path of CheckEligibility, GetStatus and GetEntitlements through the per-user summaries
// (docs/evaluation-cache.md "Per-user summaries"): a user whose stored summary answers at the call's instant, for
// the app's cached catalog and policy, is answered from it; the others from their histories, and
// at "now" their summaries are rewritten (compare-and-set: never over a newer write's).
import RPCCore
import Synchronization
import SubstatusMetrics
import SubscriptionDomain
import SubscriptionStorage

/// Why a read did not answer from a user's summary; the `reason` label of
/// `substatus_summary_fallbacks_total`.
enum SummaryFallback: Int, CaseIterable, Sendable {
  /// No summary is stored (a user written before summaries existed, or never written).
  case missing
  /// The stored bytes are of a format this build cannot read.
  case undecodable
  /// Computed with another catalog or policy.
  case fingerprint
  /// The call asks about an instant before the summary was computed (a past `as_of_ms`).
  case before
  /// Time alone changed an answer since it was computed (`valid_until_ms` reached).
  case expired

  var label: String {
    switch self {
    case .missing: "missing"
    case .undecodable: "undecodable"
    case .fingerprint: "fingerprint"
    case .before: "before"
    case .expired: "expired"
    }
  }

  init(_ unusable: UserSummary.Unusable) {
    switch unusable {
    case .fingerprint: self = .fingerprint
    case .before: self = .before
    case .expired: self = .expired
    }
  }
}

/// Counters of the summary read path, for `/metrics`.
final class SummaryMetrics: MetricsSource, Sendable {
  private let hits = Atomic<Int>(0)
  /// Per ``SummaryFallback``'s raw value (fallbacks are the rare case: a lock will do).
  private let fallbackCounts = Mutex([Int](repeating: 0, count: SummaryFallback.allCases.count))
  private let rewrites = Atomic<Int>(0)
  private let refusedRewrites = Atomic<Int>(0)

  init() {}

  func hit(_ n: Int = 1) { hits.add(n, ordering: .relaxed) }
  func fallback(_ reason: SummaryFallback) { fallbackCounts.withLock { $0[reason.rawValue] += 1 } }
  func rewrote(stored: Int, refused: Int) {
    rewrites.add(stored, ordering: .relaxed)
    refusedRewrites.add(refused, ordering: .relaxed)
  }

  /// The count of `reason` (tests).
  func fallbacks(_ reason: SummaryFallback) -> Int { fallbackCounts.withLock { $0[reason.rawValue] } }
  /// The hits (tests).
  var hitCount: Int { hits.load(ordering: .relaxed) }

  func metricFamilies() -> [MetricFamily] {
    let counts = fallbackCounts.withLock { $0 }
    return [
      .counter(
        "substatus_summary_hits_total",
        "Users answered from their stored summary (CheckEligibility, GetStatus, GetEntitlements).",
        hits.load(ordering: .relaxed)),
      .labelled(
        "substatus_summary_fallbacks_total", "Users answered from their history instead, by reason.", .counter,
        label: "reason", SummaryFallback.allCases.map { ($0.label, counts[$0.rawValue]) }),
      .labelled(
        "substatus_summary_rewrites_total",
        "Summaries the read path rewrote after a fallback, by outcome (refused: a write came in between).", .counter,
        label: "outcome",
        [("stored", rewrites.load(ordering: .relaxed)), ("refused", refusedRewrites.load(ordering: .relaxed))]),
    ]
  }
}

extension SubstatusService {
  /// One user's answer: the evaluation, and the summary it came from (or was stored from), which
  /// also answers named entitlements; `nil` for an evaluation of the history at a past instant.
  struct SummaryAnswer {
    var evaluation: SubscriptionEvaluation
    var summary: UserSummary?
  }

  /// The evaluations of users of one app and environment at `time`, by user id, with the
  /// summaries they came from: from their stored summaries where those answer (same catalog and
  /// policy as `cached`, `time` in their window), decoded whole, else from their histories with
  /// ownership gaps. When `rewrite` (the call asks about "now"), a fallback's summary is computed
  /// at `time` from the history it read and stored unless a write came since the summary was read
  /// (the stamps are read before the histories).
  func answers(
    of userIds: [String], environment: SubscriptionDomain.Environment, _ cached: CachedApp, at time: Int64,
    rewrite: Bool
  ) async throws(RPCError) -> [String: SummaryAnswer] {
    try await read(
      userIds, environment: environment, cached, at: time, rewrite: rewrite,
      fromSummary: { (encoded) throws(UserSummaryDecodingError) -> SummaryAnswer? in
        let summary = try encoded.decoded()
        return summary.evaluation(
          catalog: cached.catalog, policy: cached.app.policy, fingerprint: cached.summaryFingerprint, at: time
        ).map { SummaryAnswer(evaluation: $0, summary: summary) }
      },
      fromHistory: { evaluation, summary in SummaryAnswer(evaluation: evaluation, summary: summary) })
  }

  /// The users' eligibility answers at `time` (CheckEligibility): from a summary that answers,
  /// only its group and app facts are decoded
  /// (``UserSummary/Encoded/eligibility(catalog:policy:fingerprint:at:)``); the others are
  /// evaluated from their histories as in ``answers(of:environment:_:at:rewrite:)``.
  func eligibilityAnswers(
    of userIds: [String], environment: SubscriptionDomain.Environment, _ cached: CachedApp, at time: Int64,
    rewrite: Bool
  ) async throws(RPCError) -> [String: EligibilityAnswers] {
    try await read(
      userIds, environment: environment, cached, at: time, rewrite: rewrite,
      fromSummary: { (encoded) throws(UserSummaryDecodingError) -> EligibilityAnswers? in
        try encoded.eligibility(
          catalog: cached.catalog, policy: cached.app.policy, fingerprint: cached.summaryFingerprint, at: time)
      },
      fromHistory: { evaluation, _ in evaluation.eligibilityAnswers })
  }

  /// The read path shared by every summary read: the users' stored summaries in one statement;
  /// `fromSummary` answers a user whose summary answers at `time` (a decoding error counts as
  /// `undecodable`), `fromHistory` the others from the evaluation of their histories (with the
  /// summary stored from it, when `rewrite`).
  func read<Answer>(
    _ userIds: [String], environment: SubscriptionDomain.Environment, _ cached: CachedApp, at time: Int64,
    rewrite: Bool, fromSummary: (UserSummary.Encoded) throws(UserSummaryDecodingError) -> Answer?,
    fromHistory: (SubscriptionEvaluation, UserSummary?) -> Answer
  ) async throws(RPCError) -> [String: Answer] {
    let appId = cached.app.appId
    let rows = try await stored { () throws(StoreError) in
      try await purchaseStore.summaries(appId: appId, environment: environment, userIds: userIds)
    }
    var out: [String: Answer] = [:]
    out.reserveCapacity(userIds.count)
    var missing: [String] = []
    for userId in userIds {
      guard let row = rows[userId] else {
        summaryMetrics.fallback(.missing)
        missing.append(userId)
        continue
      }
      guard let encoded = row.encoded else {
        summaryMetrics.fallback(.undecodable)
        missing.append(userId)
        continue
      }
      if let unusable = encoded.usability(fingerprint: cached.summaryFingerprint, at: time) {
        summaryMetrics.fallback(SummaryFallback(unusable))
        missing.append(userId)
        continue
      }
      // Usable, so an answer unless a section does not decode.
      guard let answer = try? fromSummary(encoded) else {
        summaryMetrics.fallback(.undecodable)
        missing.append(userId)
        continue
      }
      out[userId] = answer
    }
    summaryMetrics.hit(out.count)
    if missing.isEmpty { return out }
    // A big batch is read and evaluated a slice of users at a time, yielding between slices: the
    // event loop serves the other calls in between instead of holding them for the whole batch.
    var histories: [UserHistory] = []
    histories.reserveCapacity(missing.count)
    let slice = Self.eligibilitySlice
    for start in stride(from: 0, to: missing.count, by: slice) {
      if start > 0 { await Task.yield() }
      let userIds = Array(missing[start..<min(start + slice, missing.count)])
      histories += try await owning(
        try await stored { () throws(StoreError) in
          try await purchaseStore.histories(appId: appId, environment: environment, userIds: userIds)
        }, cached)
    }
    var rewrites: [SummaryRewrite] = []
    for h in histories {
      guard rewrite else {
        out[h.user.userId] = fromHistory(evaluate(h, cached, at: time), nil)
        continue
      }
      let summary = UserSummary(
        transactions: h.transactions, renewals: h.renewalInfos, gaps: h.ownershipGaps, catalog: cached.catalog,
        policy: cached.app.policy, at: time)
      if let evaluation = summary.evaluation(
        catalog: cached.catalog, policy: cached.app.policy, fingerprint: cached.summaryFingerprint, at: time)
      {
        out[h.user.userId] = fromHistory(evaluation, summary)
      } else {
        out[h.user.userId] = fromHistory(evaluate(h, cached, at: time), nil)
      }
      // A user with no data has nothing to summarize (and nothing a rewrite could store).
      if !h.transactions.isEmpty || !h.renewalInfos.isEmpty {
        rewrites.append(SummaryRewrite(userId: h.user.userId, expectedStamp: rows[h.user.userId]?.stamp, summary: summary))
      }
    }
    if !rewrites.isEmpty {
      // A failed rewrite costs a later fallback, never an answer.
      let written = (try? await purchaseStore.rewriteSummaries(appId: appId, environment: environment, rewrites)) ?? 0
      summaryMetrics.rewrote(stored: written, refused: rewrites.count - written)
    }
    return out
  }
}
