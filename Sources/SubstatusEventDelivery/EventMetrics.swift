import SubscriptionStorage
import Synchronization

/// Prometheus metrics of the event log's consumers: events appended (by the source that wrote
/// them), webhook delivery attempts by outcome, and WatchEvents streams open. Part of the service's
/// ``ServiceMetrics/prometheusText()`` (the service adds it as a source).
public final class EventMetrics: Sendable {
  private struct State {
    var appended: [String: UInt64] = [:]
    var deliveries: [String: UInt64] = [:]
    var webhookCreatesRefused: [String: UInt64] = ["app": 0, "tenant": 0]
    var webhookLimits: WebhookLimits?
  }

  private let state = Mutex(State())
  private let watchers = Atomic<Int>(0)

  /// Empty metrics.
  public init() {}

  /// A write appended `count` events; `source` is `ingest`, `notification` or `transition`.
  public func appended(_ count: Int, source: String) {
    guard count > 0 else { return }
    state.withLock { $0.appended[source, default: 0] += UInt64(count) }
  }

  /// A webhook delivery attempt ended with `outcome` (`delivered`, `retry`, `failed`).
  public func delivery(outcome: String) {
    state.withLock { $0.deliveries[outcome, default: 0] += 1 }
  }

  /// A CreateWebhook was refused at the cap `cap` (`app` or `tenant`).
  public func webhookCreateRefused(cap: String) {
    state.withLock { $0.webhookCreatesRefused[cap, default: 0] += 1 }
  }

  /// The webhook caps in force, shown as gauges.
  public func setWebhookLimits(_ limits: WebhookLimits) {
    state.withLock { $0.webhookLimits = limits }
  }

  package func watcherStarted() { watchers.add(1, ordering: .relaxed) }

  package func watcherEnded() { watchers.subtract(1, ordering: .relaxed) }

  /// WatchEvents streams open now.
  public var openWatchers: Int { watchers.load(ordering: .relaxed) }

  /// The metrics in the Prometheus text exposition format (version 0.0.4).
  public func prometheusText() -> String {
    let s = state.withLock { $0 }
    var out = "# HELP substatus_events_appended_total Events appended to the log, by the write that derived them.\n"
    out += "# TYPE substatus_events_appended_total counter\n"
    for (source, n) in s.appended.sorted(by: { $0.key < $1.key }) {
      out += "substatus_events_appended_total{source=\"\(source)\"} \(n)\n"
    }
    out += "# HELP substatus_webhook_delivery_attempts_total Webhook delivery attempts, by outcome.\n"
    out += "# TYPE substatus_webhook_delivery_attempts_total counter\n"
    for (outcome, n) in s.deliveries.sorted(by: { $0.key < $1.key }) {
      out += "substatus_webhook_delivery_attempts_total{outcome=\"\(outcome)\"} \(n)\n"
    }
    out += "# HELP substatus_webhook_creates_refused_total CreateWebhook calls refused at a webhook cap, by cap (app or tenant).\n"
    out += "# TYPE substatus_webhook_creates_refused_total counter\n"
    for (cap, n) in s.webhookCreatesRefused.sorted(by: { $0.key < $1.key }) {
      out += "substatus_webhook_creates_refused_total{cap=\"\(cap)\"} \(n)\n"
    }
    if let limits = s.webhookLimits {
      out += "# HELP substatus_webhook_limit The webhook caps: webhooks per app and per tenant.\n"
      out += "# TYPE substatus_webhook_limit gauge\n"
      out += "substatus_webhook_limit{cap=\"app\"} \(limits.perApp)\n"
      out += "substatus_webhook_limit{cap=\"tenant\"} \(limits.perTenant)\n"
    }
    out += "# HELP substatus_event_watchers WatchEvents streams open.\n# TYPE substatus_event_watchers gauge\n"
    out += "substatus_event_watchers \(openWatchers)\n"
    return out
  }
}
