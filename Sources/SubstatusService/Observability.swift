import Dispatch
import Foundation
import RPCCore
import Synchronization
import SubstatusClock
import SubstatusJSON
import SubscriptionDomain

/// Prometheus metrics of the service: RPCs by method and status with latency histograms, store
/// ingest counts, upstream verifyReceipt calls by status, eligibility answers, notifications,
/// background refreshes and the Server API reconciler's passes.
public final class ServiceMetrics: Sendable {
  static let buckets: [Double] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

  struct Histogram {
    var counts = [UInt64](repeating: 0, count: ServiceMetrics.buckets.count)
    var sum = 0.0
    var count: UInt64 = 0

    mutating func observe(_ seconds: Double) {
      // In place: the buckets from the first that holds `seconds` on.
      counts.withUnsafeMutableBufferPointer { counts in
        var i = counts.count
        while i > 0, seconds <= ServiceMetrics.buckets[i - 1] { i -= 1 }
        for k in i..<counts.count { counts[k] += 1 }
      }
      sum += seconds
      count += 1
    }
  }

  /// The counts of one method (or protocol) by gRPC status, indexed by the code's value.
  struct CodeCounts {
    static let codeCount = 17
    var counts = [UInt64](repeating: 0, count: CodeCounts.codeCount)

    /// The codes counted at least once, by their names, sorted by name.
    var byName: [(code: String, count: UInt64)] {
      counts.indices.compactMap { i in
        counts[i] > 0 ? RPCError.Code(rawValue: i).map { ($0.description, counts[i]) } : nil
      }.sorted { $0.code < $1.code }
    }
  }

  /// What one method's calls add up to.
  struct MethodCounters {
    var codes = CodeCounts()
    var latency = Histogram()
  }

  struct State {
    // One lookup by method per call (the codes and the histogram are in the entry), and the
    // protocol's counts by index: no dictionary of code names to hash into.
    var rpcs: [String: MethodCounters] = [:]  // method
    var rpcsByProtocol = [CodeCounts](repeating: CodeCounts(), count: RPCProtocol.allCases.count)
    var upstream: [String: UInt64] = [:]
    var upstreamLatency = Histogram()
    var ingestedTransactions: UInt64 = 0
    var unknownOwnership: UInt64 = 0
    var eligibilityUsers: UInt64 = 0
    var eligibilityItems: UInt64 = 0
    var notifications: [String: UInt64] = [:]
    var refreshes: [String: UInt64] = [:]
    var reconcilerRuns: UInt64 = 0
    var reconcilerNotifications: UInt64 = 0
    var reconcilerUsersSynced: UInt64 = 0
    var reconcilerFailures: UInt64 = 0
    var revocationSyncs: [String: UInt64] = [:]
  }

  private let state = Mutex(State())
  private let sources = Mutex<[@Sendable () -> String]>([])

  /// Empty metrics.
  public init() {}

  /// Adds the metrics of another component (the gRPC transport's limits), in the Prometheus text
  /// format, to ``prometheusText()``.
  public func addSource(_ source: @escaping @Sendable () -> String) {
    sources.withLock { $0.append(source) }
  }

  /// Each protocol's index in `rpcsByProtocol` (`RPCProtocol.allCases` builds an array on each use).
  private static let protocols = RPCProtocol.allCases

  /// Counts one call: one dictionary lookup by method (no counters built after the method's first
  /// call), its code and latency counted in place, nothing allocated.
  func rpc(method: String, code: RPCError.Code, seconds: Double, rpcProtocol: RPCProtocol = .grpc) {
    let protocolIndex = Self.protocols.firstIndex(of: rpcProtocol) ?? 0
    let codeIndex = min(max(code.rawValue, 0), CodeCounts.codeCount - 1)
    state.withLock { s in
      let index: Dictionary<String, MethodCounters>.Index
      if let found = s.rpcs.index(forKey: method) {
        index = found
      } else {
        s.rpcs[method] = MethodCounters()
        index = s.rpcs.index(forKey: method)!
      }
      s.rpcs.values[index].codes.counts[codeIndex] += 1
      s.rpcs.values[index].latency.observe(seconds)
      s.rpcsByProtocol[protocolIndex].counts[codeIndex] += 1
    }
  }

  func upstream(status: String, seconds: Double) {
    state.withLock {
      $0.upstream[status, default: 0] += 1
      $0.upstreamLatency.observe(seconds)
    }
  }

  func ingested(_ n: Int) { state.withLock { $0.ingestedTransactions += UInt64(max(0, n)) } }

  /// Counts the transactions of a submission whose `inAppOwnershipType` this build does not know
  /// (rule 23: stored as given and treated as a purchase, with this warning).
  func received(_ transactions: [SubscriptionDomain.Transaction]) {
    var unknown: UInt64 = 0
    for t in transactions where t.hasUnknownOwnership { unknown += 1 }
    if unknown > 0 { state.withLock { $0.unknownOwnership += unknown } }
  }

  func evaluated(users: Int, items: Int) {
    state.withLock {
      $0.eligibilityUsers += UInt64(users)
      $0.eligibilityItems += UInt64(items)
    }
  }

  func notification(outcome: String) { state.withLock { $0.notifications[outcome, default: 0] += 1 } }

  func refreshed(outcome: String) { state.withLock { $0.refreshes[outcome, default: 0] += 1 } }

  /// A pass of the reconciler over every app began.
  func reconcilerRan() { state.withLock { $0.reconcilerRuns += 1 } }

  /// One app and environment of a pass was reconciled.
  func reconciled(_ summary: ServerAPIReconciler.Summary) {
    state.withLock {
      $0.reconcilerNotifications += UInt64(summary.notifications)
      $0.reconcilerUsersSynced += UInt64(summary.usersSynced)
    }
  }

  /// One app and environment of a pass failed, or a pass could not list the apps.
  func reconcileFailed() { state.withLock { $0.reconcilerFailures += 1 } }

  /// A Server API sync after a V2 REFUND or REVOKE ended with `outcome`.
  func revocationSync(outcome: String) { state.withLock { $0.revocationSyncs[outcome, default: 0] += 1 } }

  /// The metrics in the Prometheus text exposition format (version 0.0.4).
  public func prometheusText() -> String {
    let s = state.withLock { $0 }
    var out = sources.withLock { $0 }.map { $0() }.joined()
    let cut = StatusBounds.cutCounts
    out += "# HELP substatus_status_cut_total Status messages and details cut to their bounds (README \"Limits\").\n"
    out += "# TYPE substatus_status_cut_total counter\n"
    out += "substatus_status_cut_total{part=\"message\"} \(cut.messages)\nsubstatus_status_cut_total{part=\"details\"} \(cut.details)\n"
    out += "# HELP substatus_rpcs_total RPCs handled, by method and gRPC status.\n# TYPE substatus_rpcs_total counter\n"
    let methods = s.rpcs.sorted(by: { $0.key < $1.key })
    for (method, counters) in methods {
      for (code, n) in counters.codes.byName {
        out += "substatus_rpcs_total{method=\"\(method)\",code=\"\(code)\"} \(n)\n"
      }
    }
    out += "# HELP substatus_rpcs_by_protocol_total RPCs handled, by protocol (grpc, grpc-web, connect) and gRPC status.\n# TYPE substatus_rpcs_by_protocol_total counter\n"
    let protocols = RPCProtocol.allCases.indices.map { (RPCProtocol.allCases[$0].rawValue, s.rpcsByProtocol[$0]) }
    for (rpcProtocol, codes) in protocols.sorted(by: { $0.0 < $1.0 }) {
      for (code, n) in codes.byName {
        out += "substatus_rpcs_by_protocol_total{protocol=\"\(rpcProtocol)\",code=\"\(code)\"} \(n)\n"
      }
    }
    out += "# HELP substatus_rpc_duration_seconds RPC latency, by method.\n# TYPE substatus_rpc_duration_seconds histogram\n"
    for (method, counters) in methods {
      out += histogram("substatus_rpc_duration_seconds", "method=\"\(method)\",", counters.latency)
    }
    out += "# HELP substatus_upstream_verify_receipt_total verifyReceipt calls, by Apple status.\n# TYPE substatus_upstream_verify_receipt_total counter\n"
    for (status, n) in s.upstream.sorted(by: { $0.key < $1.key }) {
      out += "substatus_upstream_verify_receipt_total{status=\"\(status)\"} \(n)\n"
    }
    out += "# HELP substatus_upstream_verify_receipt_duration_seconds verifyReceipt latency.\n# TYPE substatus_upstream_verify_receipt_duration_seconds histogram\n"
    out += histogram("substatus_upstream_verify_receipt_duration_seconds", "", s.upstreamLatency)
    out += "# HELP substatus_ingested_transactions_total Transactions written to the store.\n# TYPE substatus_ingested_transactions_total counter\n"
    out += "substatus_ingested_transactions_total \(s.ingestedTransactions)\n"
    out += "# HELP substatus_unknown_ownership_transactions_total Transactions received with an inAppOwnershipType this build does not know (stored as given, treated as purchased).\n# TYPE substatus_unknown_ownership_transactions_total counter\n"
    out += "substatus_unknown_ownership_transactions_total \(s.unknownOwnership)\n"
    out += "# HELP substatus_eligibility_users_total Users answered by CheckEligibility.\n# TYPE substatus_eligibility_users_total counter\n"
    out += "substatus_eligibility_users_total \(s.eligibilityUsers)\n"
    out += "# HELP substatus_eligibility_answers_total User x product answers of CheckEligibility.\n# TYPE substatus_eligibility_answers_total counter\n"
    out += "substatus_eligibility_answers_total \(s.eligibilityItems)\n"
    out += "# HELP substatus_notifications_total App Store notifications received, by outcome.\n# TYPE substatus_notifications_total counter\n"
    for (outcome, n) in s.notifications.sorted(by: { $0.key < $1.key }) {
      out += "substatus_notifications_total{outcome=\"\(outcome)\"} \(n)\n"
    }
    out += "# HELP substatus_receipt_refreshes_total Background receipt refreshes, by outcome.\n# TYPE substatus_receipt_refreshes_total counter\n"
    for (outcome, n) in s.refreshes.sorted(by: { $0.key < $1.key }) {
      out += "substatus_receipt_refreshes_total{outcome=\"\(outcome)\"} \(n)\n"
    }
    out += "# HELP substatus_reconciler_runs_total Passes of the Server API reconciler over every app.\n# TYPE substatus_reconciler_runs_total counter\n"
    out += "substatus_reconciler_runs_total \(s.reconcilerRuns)\n"
    out += "# HELP substatus_reconciler_notifications_total Notifications found in Apple's notification history by the reconciler.\n# TYPE substatus_reconciler_notifications_total counter\n"
    out += "substatus_reconciler_notifications_total \(s.reconcilerNotifications)\n"
    out += "# HELP substatus_reconciler_users_synced_total Users synced from the App Store Server API by the reconciler.\n# TYPE substatus_reconciler_users_synced_total counter\n"
    out += "substatus_reconciler_users_synced_total \(s.reconcilerUsersSynced)\n"
    out += "# HELP substatus_reconciler_failures_total Reconciliations of an app and environment that failed (the next pass covers the span again).\n# TYPE substatus_reconciler_failures_total counter\n"
    out += "substatus_reconciler_failures_total \(s.reconcilerFailures)\n"
    out += "# HELP substatus_revocation_syncs_total Server API syncs triggered by V2 REFUND and REVOKE, by outcome.\n# TYPE substatus_revocation_syncs_total counter\n"
    for (outcome, n) in s.revocationSyncs.sorted(by: { $0.key < $1.key }) {
      out += "substatus_revocation_syncs_total{outcome=\"\(outcome)\"} \(n)\n"
    }
    return out
  }

  private func histogram(_ name: String, _ labels: String, _ h: Histogram) -> String {
    var out = ""
    for (i, b) in ServiceMetrics.buckets.enumerated() {
      out += "\(name)_bucket{\(labels)le=\"\(b)\"} \(h.counts[i])\n"
    }
    out += "\(name)_bucket{\(labels)le=\"+Inf\"} \(h.count)\n"
    let trimmed = labels.isEmpty ? "" : "{\(labels.dropLast())}"
    out += "\(name)_sum\(trimmed) \(h.sum)\n\(name)_count\(trimmed) \(h.count)\n"
    return out
  }
}

/// One JSON object written member by member straight into UTF-8 bytes, for the access log's line
/// per RPC: the same text as a ``JSONObject`` serialized (members in the order written, strings
/// escaped as ``JSONValue`` escapes them, numbers as ``JSONValue/integer(_:)`` and
/// ``JSONValue/double(_:)`` write them) without building the tree or formatting numbers through
/// `String`.
struct JSONLine {
  private var bytes: [UInt8] = []

  /// An empty object.
  init() {
    bytes.reserveCapacity(320)
    bytes.append(UInt8(ascii: "{"))
  }

  /// The object's text.
  consuming func finish() -> [UInt8] {
    bytes.append(UInt8(ascii: "}"))
    return bytes
  }

  /// A member with a string value. Printable ASCII without `"` or `\` (methods, addresses, ids)
  /// is copied as it is; anything else is escaped by ``JSONValue``'s serialization.
  mutating func append(_ key: StaticString, string value: String) {
    name(key)
    if value.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") }) {
      bytes.append(UInt8(ascii: "\""))
      bytes.append(contentsOf: value.utf8)
      bytes.append(UInt8(ascii: "\""))
    } else {
      bytes.append(contentsOf: JSONValue.string(value).serializedBytes())
    }
  }

  /// A member with an integer value.
  mutating func append(_ key: StaticString, integer value: Int64) {
    name(key)
    digits(value)
  }

  /// A member whose value is `microseconds / 1000`: the text of
  /// `JSONValue.double(Double(microseconds) / 1000)` (`12`, `1.5`, `0.001`) without `Double`'s
  /// description.
  mutating func append(_ key: StaticString, milliseconds microseconds: Int64) {
    name(key)
    let negative = microseconds < 0
    let magnitude = microseconds.magnitude
    if negative { bytes.append(UInt8(ascii: "-")) }
    digits(Int64(magnitude / 1000))
    var fraction = Int(magnitude % 1000)
    guard fraction != 0 else { return }
    bytes.append(UInt8(ascii: "."))
    var scale = 100
    while fraction != 0 {
      bytes.append(UInt8(ascii: "0") + UInt8(fraction / scale))
      fraction %= scale
      scale /= 10
    }
  }

  /// The member's name: a literal of the caller's, which needs no escaping.
  private mutating func name(_ key: StaticString) {
    if bytes.count > 1 { bytes.append(UInt8(ascii: ",")) }
    bytes.append(UInt8(ascii: "\""))
    key.withUTF8Buffer { bytes.append(contentsOf: $0) }
    bytes.append(UInt8(ascii: "\""))
    bytes.append(UInt8(ascii: ":"))
  }

  private mutating func digits(_ value: Int64) {
    if value < 0 { bytes.append(UInt8(ascii: "-")) }
    let magnitude = value.magnitude
    var divisor: UInt64 = 1
    while divisor <= magnitude / 10 { divisor *= 10 }
    repeat {
      bytes.append(UInt8(ascii: "0") + UInt8(magnitude / divisor % 10))
      divisor /= 10
    } while divisor > 0
  }
}
