import Dispatch
import Foundation
import RPCCore
import Synchronization
import SubstatusClock
import SubstatusJSON
import SubstatusMetrics
import SubscriptionDomain
import SubstatusBackgroundJobs

/// Prometheus metrics of the service: RPCs by method and status with latency histograms, store
/// ingest counts, upstream verifyReceipt calls by status, eligibility answers, notifications,
/// background refreshes and the Server API reconciler's passes. It also holds the process's
/// ``MetricsRegistry``: the other components' families come first in ``prometheusText()``.
public final class ServiceMetrics: Sendable {
  /// The latency buckets of the RPC and verifyReceipt histograms.
  static let buckets = HistogramBuckets.latencySeconds

  /// The gRPC status codes, by their value: the slots of a ``BoundedCounts`` by code.
  static let codeNames: [String] = (0..<17).map { RPCError.Code(rawValue: $0)?.description ?? "\($0)" }

  /// What one method's calls add up to.
  struct MethodCounters {
    var codes = BoundedCounts(values: ServiceMetrics.codeNames)
    var latency = HistogramValues(ServiceMetrics.buckets)
  }

  struct State {
    // One lookup by method per call (the codes and the histogram are in the entry), and the
    // protocol's counts by index: no dictionary of code names to hash into.
    var rpcs: [String: MethodCounters] = [:]  // method
    var rpcsByProtocol = [BoundedCounts](
      repeating: BoundedCounts(values: ServiceMetrics.codeNames), count: RPCProtocol.allCases.count)
    var upstream: [String: UInt64] = [:]
    var upstreamLatency = HistogramValues(ServiceMetrics.buckets)
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
    var appAccountTokenWrites: [String: UInt64] = [:]
  }

  private let state = Mutex(State())
  /// The other components' metrics (the transport, the stores, the listeners), shown before the
  /// service's own.
  public let registry = MetricsRegistry()

  /// Empty metrics.
  public init() {}

  /// Adds the metrics of another component (the gRPC transport's limits), read at each scrape,
  /// to ``prometheusText()``.
  public func addSource(_ source: @escaping @Sendable () -> [MetricFamily]) {
    registry.register(source)
  }

  /// Each protocol's index in `rpcsByProtocol` (`RPCProtocol.allCases` builds an array on each use).
  private static let protocols = RPCProtocol.allCases

  /// Counts one call: one dictionary lookup by method (no counters built after the method's first
  /// call), its code and latency counted in place, nothing allocated.
  func rpc(method: String, code: RPCError.Code, seconds: Double, rpcProtocol: RPCProtocol = .grpc) {
    let protocolIndex = Self.protocols.firstIndex(of: rpcProtocol) ?? 0
    let codeIndex = min(max(code.rawValue, 0), Self.codeNames.count - 1)
    state.withLock { s in
      let index: Dictionary<String, MethodCounters>.Index
      if let found = s.rpcs.index(forKey: method) {
        index = found
      } else {
        s.rpcs[method] = MethodCounters()
        index = s.rpcs.index(forKey: method)!
      }
      s.rpcs.values[index].codes.add(at: codeIndex)
      s.rpcs.values[index].latency.observe(seconds)
      s.rpcsByProtocol[protocolIndex].add(at: codeIndex)
    }
  }

  package func upstream(status: String, seconds: Double) {
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

  package func refreshed(outcome: String) { state.withLock { $0.refreshes[outcome, default: 0] += 1 } }

  /// A pass of the reconciler over every app began.
  package func reconcilerRan() { state.withLock { $0.reconcilerRuns += 1 } }

  /// One app and environment of a pass was reconciled.
  package func reconciled(_ summary: ServerAPIReconciler.Summary) {
    state.withLock {
      $0.reconcilerNotifications += UInt64(summary.notifications)
      $0.reconcilerUsersSynced += UInt64(summary.usersSynced)
    }
  }

  /// One app and environment of a pass failed, or a pass could not list the apps.
  package func reconcileFailed() { state.withLock { $0.reconcilerFailures += 1 } }

  /// A Server API sync after a V2 REFUND or REVOKE ended with `outcome`.
  package func revocationSync(outcome: String) { state.withLock { $0.revocationSyncs[outcome, default: 0] += 1 } }
  package func appAccountTokenWrite(outcome: String) { state.withLock { $0.appAccountTokenWrites[outcome, default: 0] += 1 } }

  /// The registered components' families, then the service's own.
  public func metricFamilies() -> [MetricFamily] { registry.families() + ownFamilies() }

  /// Every family in the Prometheus text exposition format (version 0.0.4).
  public func prometheusText() -> String { PrometheusText.render(metricFamilies()) }

  /// The service's own families.
  func ownFamilies() -> [MetricFamily] {
    let s = state.withLock { $0 }
    let cut = StatusBounds.cutCounts
    let methods = s.rpcs.sorted(by: { $0.key < $1.key })
    let protocols = Self.protocols.indices.map { (Self.protocols[$0].rawValue, s.rpcsByProtocol[$0]) }
      .sorted(by: { $0.0 < $1.0 })
    func byOutcome(_ name: String, _ help: String, _ label: String, _ counts: [String: UInt64]) -> MetricFamily {
      .labelled(name, help, .counter, label: label, counts.sorted(by: { $0.key < $1.key }).map { ($0.key, $0.value) })
    }
    return [
      .labelled(
        "substatus_status_cut_total", "Status messages and details cut to their bounds (README \"Limits\").",
        .counter, label: "part", [("message", cut.messages), ("details", cut.details)]),
      MetricFamily(
        name: "substatus_rpcs_total", help: "RPCs handled, by method and gRPC status.", type: .counter,
        samples: methods.flatMap { method, counters in
          counters.codes.nonZeroSortedByValue.map { .value([("method", method), ("code", $0.0)], .unsigned($0.1)) }
        }),
      MetricFamily(
        name: "substatus_rpcs_by_protocol_total",
        help: "RPCs handled, by protocol (grpc, grpc-web, connect) and gRPC status.", type: .counter,
        samples: protocols.flatMap { rpcProtocol, codes in
          codes.nonZeroSortedByValue.map { .value([("protocol", rpcProtocol), ("code", $0.0)], .unsigned($0.1)) }
        }),
      MetricFamily(
        name: "substatus_rpc_duration_seconds", help: "RPC latency, by method.", type: .histogram,
        samples: methods.map { .histogram([("method", $0.key)], $0.value.latency.snapshot) }),
      byOutcome(
        "substatus_upstream_verify_receipt_total", "verifyReceipt calls, by Apple status.", "status", s.upstream),
      MetricFamily(
        name: "substatus_upstream_verify_receipt_duration_seconds", help: "verifyReceipt latency.", type: .histogram,
        samples: [.histogram([], s.upstreamLatency.snapshot)]),
      .counter(
        "substatus_ingested_transactions_total", "Transactions written to the store.", s.ingestedTransactions),
      .counter(
        "substatus_unknown_ownership_transactions_total",
        "Transactions received with an inAppOwnershipType this build does not know (stored as given, treated as purchased).",
        s.unknownOwnership),
      .counter("substatus_eligibility_users_total", "Users answered by CheckEligibility.", s.eligibilityUsers),
      .counter("substatus_eligibility_answers_total", "User x product answers of CheckEligibility.", s.eligibilityItems),
      byOutcome(
        "substatus_notifications_total", "App Store notifications received, by outcome.", "outcome", s.notifications),
      byOutcome(
        "substatus_receipt_refreshes_total", "Background receipt refreshes, by outcome.", "outcome", s.refreshes),
      .counter(
        "substatus_reconciler_runs_total", "Passes of the Server API reconciler over every app.", s.reconcilerRuns),
      .counter(
        "substatus_reconciler_notifications_total",
        "Notifications found in Apple's notification history by the reconciler.", s.reconcilerNotifications),
      .counter(
        "substatus_reconciler_users_synced_total", "Users synced from the App Store Server API by the reconciler.",
        s.reconcilerUsersSynced),
      .counter(
        "substatus_reconciler_failures_total",
        "Reconciliations of an app and environment that failed (the next pass covers the span again).",
        s.reconcilerFailures),
      byOutcome(
        "substatus_revocation_syncs_total", "Server API syncs triggered by V2 REFUND and REVOKE, by outcome.",
        "outcome", s.revocationSyncs),
      byOutcome(
        "substatus_app_account_token_writes_total",
        "Set App Account Token calls after purchase sharing transfers, by outcome (ok, failed, not_uuid, no_key).",
        "outcome", s.appAccountTokenWrites),
    ]
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

extension ServiceMetrics: BackgroundJobCounters {}
