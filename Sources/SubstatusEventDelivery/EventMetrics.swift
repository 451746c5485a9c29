import SubscriptionStorage
import SubstatusMetrics
import Synchronization

/// Prometheus metrics of the event log's consumers: events appended (by the source that wrote
/// them), webhook delivery attempts by outcome, and WatchEvents streams open. Part of the service's
/// ``ServiceMetrics/prometheusText()`` (the service registers it).
public final class EventMetrics: MetricsSource, Sendable {
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

  /// The families: events appended, delivery attempts, refused creates, the caps, watchers.
  public func metricFamilies() -> [MetricFamily] {
    let s = state.withLock { $0 }
    func sorted(_ counts: [String: UInt64]) -> [(String, UInt64)] {
      counts.sorted(by: { $0.key < $1.key }).map { ($0.key, $0.value) }
    }
    var families: [MetricFamily] = [
      .labelled(
        "substatus_events_appended_total", "Events appended to the log, by the write that derived them.", .counter,
        label: "source", sorted(s.appended)),
      .labelled(
        "substatus_webhook_delivery_attempts_total", "Webhook delivery attempts, by outcome.", .counter,
        label: "outcome", sorted(s.deliveries)),
      .labelled(
        "substatus_webhook_creates_refused_total",
        "CreateWebhook calls refused at a webhook cap, by cap (app or tenant).", .counter, label: "cap",
        sorted(s.webhookCreatesRefused)),
    ]
    if let limits = s.webhookLimits {
      families.append(
        .labelled(
          "substatus_webhook_limit", "The webhook caps: webhooks per app and per tenant.", .gauge, label: "cap",
          [("app", limits.perApp), ("tenant", limits.perTenant)]))
    }
    families.append(.gauge("substatus_event_watchers", "WatchEvents streams open.", openWatchers))
    return families
  }
}
