import Foundation
import SubscriptionDomain
import SubscriptionStorage
import SubstatusClock
import SubstatusJSON
import SubstatusServiceAPI
import SubstatusServiceCore
import SubstatusWire
import OutboundHTTP
import Synchronization
import SubstatusMetrics

/// Delivers the event log to webhooks (docs/architecture.md "Events"): POSTs each event as proto3
/// JSON, signed, retried with exponential backoff for 3 days, in order per user.
///
/// A loop woken by ``notifyEventsAppended()``, every ``Configuration-swift.struct/interval`` and
/// whenever attempts are recorded: ``SubscriptionStorage/WebhookStore/enqueueDeliveries(atMs:limit:)``
/// (fan-out of new events to each webhook; on notification and tick only), then one claim of many
/// due deliveries under a lease (instances sharing a database take different ones; the store hands
/// out only the oldest pending delivery per webhook and user, so the deliveries in flight to one
/// webhook are of different users and one user's events reach it in log order), then a POST of
/// each:
///
/// - headers `Content-Type: application/json`, `User-Agent`, `Substatus-Event-Id` and
///   `Substatus-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`
///   (``WebhookSigning``);
/// - any 2xx delivers; any other status, a timeout (``Configuration-swift.struct/timeout`` on the
///   environment's `wireClock`) or a connection error schedules a retry after
///   `initialBackoff × 2^(failures-1)` (capped at `maxBackoff`, jittered by ±20 % from the injected
///   randomness), until ``Configuration-swift.struct/retryWindow`` after the delivery's creation,
///   when the delivery becomes FAILED (a replay sends it again);
/// - the POST goes through the outbound HTTP client (``OutboundHTTPPoster/webhooks(client:policy:)``,
///   libcurl): every address it connects to is checked by ``WebhookURLPolicy/checkAddress(_:)`` at
///   connect time, the addresses of a name tried in turn (IPv6 and IPv4), so a DNS answer that
///   changes after any earlier check (rebinding) is never connected to unchecked; when every
///   address is refused the attempt fails with the policy's reason and is retried like any
///   failure. TLS is verified against the URL's host name. Redirects are not followed; no proxy is
///   used, whatever the environment says;
/// - a POST never outlives ``Configuration-swift.struct/timeout``: the client's total deadline
///   (connecting, sending, however slowly the answer trickles) ends it and closes its connection;
/// - at most a few KiB of an answer's body are read (``maxResponseBytes``): past that the
///   connection is closed, and the status counts;
/// - every attempt is recorded with its status, an error for people and its duration; the attempts
///   that end while a record is being committed are recorded together in the next commit
///   (``SubscriptionStorage/WebhookStore/recordDeliveryAttempts(_:)``), so the store sees a few
///   commits per batch of POSTs, not one per POST.
///
/// Concurrency: at most ``Configuration-swift.struct/maxInFlightPerWebhook`` POSTs per webhook,
/// ``Configuration-swift.struct/maxInFlightPerTenant`` per tenant and
/// ``Configuration-swift.struct/maxInFlight`` overall; about
/// ``Configuration-swift.struct/maxHeldPerTenant`` deliveries of one tenant held (a tenant at it is
/// left out of claims, and each claim takes the tenants' due deliveries in turn), so one tenant's
/// backlog, however many webhooks it spreads over, never holds the slots another tenant's
/// deliveries wait for; about
/// ``Configuration-swift.struct/maxClaimedPerWebhook`` deliveries of one webhook claimed ahead
/// (queued, in flight or being recorded). The loop never waits for a POST, so a slow or dead
/// receiver holds only its own slots and delays no other webhook.
///
/// ```swift
/// let dispatcher = WebhookDispatcher(store: store, environment: .live)
/// let task = Task { await dispatcher.run() }
/// dispatcher.notifyEventsAppended()       // after a write appended events
/// dispatcher.beginGracefulShutdown()      // on SIGTERM: POSTs in flight finish
/// await task.value
/// ```
public final class WebhookDispatcher: MetricsSource, Sendable {
  /// How the dispatcher works.
  public struct Configuration: Sendable {
    /// Time between passes when nothing wakes the loop (retries come due on it).
    public var interval: Duration
    /// The time limit of one POST.
    public var timeout: Duration
    /// POSTs in flight at once, over all webhooks.
    public var maxInFlight: Int
    /// POSTs in flight at once to one webhook.
    public var maxInFlightPerWebhook: Int
    /// POSTs in flight at once for one tenant (over all its webhooks): at most ``maxInFlight``.
    public var maxInFlightPerTenant: Int
    /// Deliveries of one tenant held (claimed, in flight or being recorded) before the tenant is
    /// left out of claims: 4 times ``maxInFlightPerTenant``, as the dispatcher holds 4 times
    /// ``maxInFlight`` overall.
    public var maxHeldPerTenant: Int { 4 * maxInFlightPerTenant }
    /// Deliveries of one webhook held (claimed and waiting for a slot, in flight, or waiting for
    /// their record) before it is left out of claims: claims run ahead of the POSTs by about this
    /// much (one claim adds at most this many to a webhook holding fewer, so it holds less than
    /// twice this). At least ``maxInFlightPerWebhook``; capped so that a receiver answering each
    /// POST at the timeout still gets every held delivery tried within the lease.
    public var maxClaimedPerWebhook: Int
    /// Deliveries claimed (and events fanned out per webhook) per store call.
    public var batchSize: Int
    /// How long a claimed delivery is this instance's; longer than a POST can take.
    public var lease: Duration
    /// The first retry's delay; each further failure doubles it.
    public var initialBackoff: Duration
    /// The longest delay between retries.
    public var maxBackoff: Duration
    /// How long after its creation a delivery is retried before it is marked FAILED.
    public var retryWindow: Duration
    /// Which URLs and addresses are refused.
    public var urlPolicy: WebhookURLPolicy
    /// The `User-Agent` header.
    public var userAgent: String

    /// Creates a configuration.
    public init(
      interval: Duration = .seconds(1), timeout: Duration = .seconds(10), maxInFlight: Int = 64,
      maxInFlightPerWebhook: Int = 16, maxInFlightPerTenant: Int = 32, maxClaimedPerWebhook: Int = 64,
      batchSize: Int = 500,
      lease: Duration = .seconds(120),
      initialBackoff: Duration = .seconds(30), maxBackoff: Duration = .seconds(4 * 3600),
      retryWindow: Duration = .seconds(3 * 86_400), urlPolicy: WebhookURLPolicy = WebhookURLPolicy(),
      userAgent: String = "substatus-webhooks/1"
    ) {
      self.interval = interval
      self.timeout = timeout
      self.maxInFlight = max(1, maxInFlight)
      self.maxInFlightPerWebhook = max(1, maxInFlightPerWebhook)
      self.maxInFlightPerTenant = min(max(1, maxInFlightPerTenant), self.maxInFlight)
      self.batchSize = min(max(1, batchSize), 1000)
      self.lease = max(lease, timeout * 3)
      // Held deliveries go out maxInFlightPerWebhook at a time, each within the timeout: all of
      // them are tried within ceil(held / inFlight) timeouts, which must stay inside the lease.
      let rounds = max(1, Int(self.lease.milliseconds / max(1, timeout.milliseconds)) - 1)
      self.maxClaimedPerWebhook = min(
        max(maxClaimedPerWebhook, self.maxInFlightPerWebhook), self.maxInFlightPerWebhook * rounds)
      self.initialBackoff = initialBackoff
      self.maxBackoff = max(maxBackoff, initialBackoff)
      self.retryWindow = retryWindow
      self.urlPolicy = urlPolicy
      self.userAgent = userAgent
    }
  }

  /// One recorded attempt of a delivery (what ``onAttempt`` hears).
  public struct AttemptReport: Sendable, Hashable {
    /// The delivery, as claimed (before this attempt).
    public var delivery: DeliveryRecord
    /// The attempt.
    public var attempt: DeliveryAttemptRecord
    /// The delivery's state after it.
    public var state: DeliveryState
    /// When it is tried again (pending only).
    public var nextAttemptMs: Int64?
  }

  /// The answer to TestWebhook: the attempt made and whether it delivered.
  public struct TestResult: Sendable, Hashable {
    /// The attempt.
    public var attempt: DeliveryAttemptRecord
    /// Whether the receiver answered 2xx.
    public var delivered: Bool
  }

  /// The most of a receiver's answer read: any 2xx delivers, the body is never used.
  public static let maxResponseBytes = 4096

  /// The settings.
  public let configuration: Configuration
  /// The cursors of the events POSTed (``EventCursors``, the service's).
  public let cursors: EventCursors
  private let store: any WebhookStore
  private let poster: any HTTPPoster
  private let environment: ServiceEnvironment
  private let log: LogSink
  private let onAttempt: (@Sendable (AttemptReport) -> Void)?
  private let timer: PeriodicJobTimer
  /// This dispatcher's name in its claims (``SubscriptionStorage/WebhookStore/releaseClaims(notMadeBy:atMs:)``).
  private let claimant: String

  private struct Target: Sendable {
    var webhook: WebhookRecord
    var url: URL
    /// Signs with the webhook's secret (its key's padded blocks hashed once per claim, not per POST).
    var signer: WebhookSigner

    init(webhook: WebhookRecord, url: URL, secret: String) {
      self.webhook = webhook
      self.url = url
      self.signer = WebhookSigner(secret: secret)
    }
  }

  private struct Claimed: Sendable {
    var delivery: DeliveryRecord
    var target: Target
  }

  /// An attempt made, waiting for its record's commit.
  private struct Finished: Sendable {
    var claimed: Claimed
    var outcome: DeliveryOutcome
  }

  private struct State {
    var wakePending = false
    var waiter: CheckedContinuation<Void, Never>?
    /// New events may be in the log: fan out on the next pass.
    var fanOutWanted = true
    /// Deliveries may have become due (a record, a tick, new events): claim on the next pass.
    var claimWanted = true
    /// Claimed deliveries per webhook waiting for a slot.
    var queued: [String: [Claimed]] = [:]
    var inFlight: [String: Int] = [:]
    /// Deliveries per webhook held in any way (queued, in flight, being recorded).
    var held: [String: Int] = [:]
    /// The ids of the deliveries held: a claim that returns one of them again (its lease passed
    /// while it was in flight, as when the clock jumps) does not send it twice.
    var heldIds: Set<String> = []
    var totalInFlight = 0
    var totalHeld = 0
    /// POSTs in flight and deliveries held per tenant.
    var tenantInFlight: [String: Int] = [:]
    var tenantHeld: [String: Int] = [:]
    /// Times a queued delivery could not start because its tenant was at its in-flight cap.
    var deferred: UInt64 = 0
    /// Attempts made and not yet recorded; one task records them at a time.
    var finished: [Finished] = []
    var recording = false

    mutating func release(_ claimed: Claimed) {
      let delivery = claimed.delivery
      let left = (held[delivery.webhookId] ?? 1) - 1
      held[delivery.webhookId] = left > 0 ? left : nil
      let tenantLeft = (tenantHeld[claimed.target.webhook.tenantId] ?? 1) - 1
      tenantHeld[claimed.target.webhook.tenantId] = tenantLeft > 0 ? tenantLeft : nil
      heldIds.remove(delivery.deliveryId)
      totalHeld -= 1
    }
  }

  private let state = Mutex(State())

  /// Creates a dispatcher; it does nothing until ``run()``.
  /// - Parameters:
  ///   - store: the webhooks and deliveries.
  ///   - environment: the clock (backoffs, leases, timestamps), the wire clock (each POST's timeout
  ///     and duration) and randomness (jitter).
  ///   - configuration: the settings.
  ///   - poster: the outbound HTTP client; by default
  ///     ``OutboundHTTPPoster/webhooks(client:policy:)`` on the shared client with the
  ///     configuration's URL policy (no redirect, at most ``maxResponseBytes`` of an answer, every
  ///     address checked at connect time).
  ///   - log: where store failures are logged (never a secret or a body).
  ///   - onAttempt: called after each recorded attempt (tests, metrics).
  public init(
    store: any WebhookStore, environment: ServiceEnvironment, configuration: Configuration = .init(),
    poster: (any HTTPPoster)? = nil,
    log: LogSink = .discard, onAttempt: (@Sendable (AttemptReport) -> Void)? = nil,
    cursors: EventCursors = EventCursors()
  ) {
    self.cursors = cursors
    self.store = store
    self.environment = environment
    self.configuration = configuration
    self.poster = poster ?? OutboundHTTPPoster.webhooks(policy: configuration.urlPolicy)
    self.log = log
    self.onAttempt = onAttempt
    self.timer = PeriodicJobTimer(clock: environment.clock)
    self.claimant = "dispatcher_" + Hex.encode(environment.randomBytes(12))
  }

  // MARK: The loop

  /// Wakes the loop at once: events were appended to the log (or deliveries came due).
  public func notifyEventsAppended() { wake(fanOut: true) }

  /// Stops ``run()``: no new POST starts, those in flight finish (their deliveries recorded);
  /// claimed deliveries not started are due again when their lease ends.
  public func beginGracefulShutdown() {
    timer.stop()
    wake()
  }

  /// Delivers until ``beginGracefulShutdown()`` or cancellation, then waits for the POSTs in flight.
  /// First takes back the deliveries an earlier run claimed and never recorded, where the store
  /// knows that run has ended (a restart after SIGKILL; not on a database other instances share).
  public func run() async {
    do {
      let released = try await store.releaseClaims(notMadeBy: claimant, atMs: environment.now())
      if released > 0 {
        log.info("webhooks: took back the deliveries an earlier run had claimed", [("deliveries", .integer(released))])
      }
    } catch {
      log.info("webhooks: cannot release earlier claims", [("error", .string(error.description))])
    }
    let ticker = Task { [timer, configuration] in
      while !timer.isStopping, !Task.isCancelled {
        await timer.wait(configuration.interval)
        self.wake(fanOut: true)
      }
    }
    await withDiscardingTaskGroup { group in
      while !timer.isStopping, !Task.isCancelled {
        let more = await pass { claimed in
          group.addTask { await self.deliver(claimed) }
        }
        if !more { await waitForWake() }
      }
    }
    ticker.cancel()
    state.withLock { s in
      for queue in s.queued.values { for claimed in queue { s.release(claimed) } }
      s.queued = [:]
    }
  }

  /// One pass: fan out new events (when told of some), claim due deliveries within the caps (when
  /// some may have come due), start what may start.
  /// - Returns: whether another pass should follow at once (a full batch was read).
  private func pass(start: (Claimed) -> Void) async -> Bool {
    let now = environment.now()
    var more = false
    let (fanOut, claim) = state.withLock { s in
      defer { (s.fanOutWanted, s.claimWanted) = (false, false) }
      return (s.fanOutWanted, s.claimWanted)
    }
    if fanOut {
      do {
        let created = try await store.enqueueDeliveries(atMs: now, limit: configuration.batchSize)
        if created >= configuration.batchSize { state.withLock { $0.fanOutWanted = true } }
        more = created > 0
      } catch {
        log.info("webhooks: cannot enqueue deliveries", [("error", .string(error.description))])
      }
    }
    let (room, busy, busyTenants) = state.withLock { s -> (Int, Set<String>, Set<String>) in
      let busy = Set(s.held.filter { $0.value >= claimBelow }.keys)
      let busyTenants = Set(s.tenantHeld.filter { $0.value >= configuration.maxHeldPerTenant }.keys)
      return (maxHeld - s.totalHeld, busy, busyTenants)
    }
    if (claim || more) && room > 0 {
      let limit = min(room, configuration.batchSize)
      do {
        let claimed = try await store.claimDueDeliveries(
          atMs: now, limit: limit, leaseUntilMs: now + configuration.lease.milliseconds,
          perWebhookLimit: configuration.maxClaimedPerWebhook, excludingWebhookIds: busy, claimant: claimant,
          shares: DeliveryClaimShares(perTenantLimit: configuration.maxHeldPerTenant, excludingTenantIds: busyTenants))
        if claimed.count >= limit { state.withLock { $0.claimWanted = true } }
        await hold(claimed)
      } catch {
        log.info("webhooks: cannot claim deliveries", [("error", .string(error.description))])
      }
    }
    for claimed in startable() { start(claimed) }
    return state.withLock { s in
      (s.fanOutWanted || s.claimWanted) && maxHeld - s.totalHeld > 0
    }
  }

  /// The scheduling metrics as metric families: POSTs in flight, tenants with POSTs in flight and
  /// at their cap, deliveries deferred for their tenant's cap.
  public func metricFamilies() -> [MetricFamily] {
    let s = state.withLock { s in
      (inFlight: s.totalInFlight, tenants: s.tenantInFlight.count,
       atCap: s.tenantInFlight.values.count { $0 >= configuration.maxInFlightPerTenant }, deferred: s.deferred)
    }
    return [
      .gauge("substatus_webhook_posts_in_flight", "Webhook POSTs in flight.", s.inFlight),
      .gauge("substatus_webhook_tenants_in_flight", "Tenants with webhook POSTs in flight.", s.tenants),
      .gauge(
        "substatus_webhook_tenants_at_in_flight_cap",
        "Tenants at their cap of webhook POSTs in flight (--webhook-max-in-flight-per-tenant).", s.atCap),
      .counter(
        "substatus_webhook_deliveries_deferred_total",
        "Times a claimed delivery waited because its tenant had its cap of POSTs in flight.", s.deferred),
      .gauge(
        "substatus_webhook_max_in_flight_per_tenant", "The cap of webhook POSTs in flight per tenant.",
        configuration.maxInFlightPerTenant),
    ]
  }

  /// Deliveries held at once over all webhooks.
  private var maxHeld: Int { 4 * configuration.maxInFlight }

  /// A webhook is claimed for while it holds fewer than this many deliveries (half of
  /// ``Configuration-swift.struct/maxClaimedPerWebhook``, at least its in-flight cap): each claim
  /// then adds up to the whole share, so the claims (each a commit) come once per half a share of
  /// recorded attempts, and the POSTs never wait for one.
  private var claimBelow: Int {
    max((configuration.maxClaimedPerWebhook + 1) / 2, configuration.maxInFlightPerWebhook)
  }

  /// Looks up the claimed deliveries' webhooks and queues them per webhook.
  private func hold(_ deliveries: [DeliveryRecord]) async {
    var targets: [String: Target?] = [:]
    for delivery in deliveries {
      if targets[delivery.webhookId] == nil {
        targets[delivery.webhookId] = await target(delivery.webhookId)
      }
      guard let target = targets[delivery.webhookId] ?? nil else { continue }
      state.withLock { s in
        guard s.heldIds.insert(delivery.deliveryId).inserted else { return }
        s.queued[delivery.webhookId, default: []].append(Claimed(delivery: delivery, target: target))
        s.held[delivery.webhookId, default: 0] += 1
        s.tenantHeld[target.webhook.tenantId, default: 0] += 1
        s.totalHeld += 1
      }
    }
  }

  /// The webhook and its secret; `nil` when it was deleted (its deliveries went with it) or cannot
  /// be read now (the lease brings its deliveries back).
  private func target(_ webhookId: String) async -> Target? {
    do {
      let webhook = try await store.webhook(id: webhookId)
      let secret = try await store.webhookSigningSecret(webhookId: webhookId)
      guard let url = URL(string: webhook.url) else { return nil }
      return Target(webhook: webhook, url: url, secret: secret)
    } catch {
      if error.code != .notFound {
        log.info(
          "webhooks: cannot read a webhook",
          [("webhook_id", .string(webhookId)), ("error", .string(error.description))])
      }
      return nil
    }
  }

  /// Takes the queued deliveries that may start now, one webhook after another (round robin), and
  /// counts them in flight.
  private func startable() -> [Claimed] {
    state.withLock { s in
      var started: [Claimed] = []
      var progress = true
      let order = s.queued.keys.sorted()
      while progress && s.totalInFlight < configuration.maxInFlight {
        progress = false
        for webhookId in order {
          guard s.totalInFlight < configuration.maxInFlight else { break }
          guard (s.inFlight[webhookId] ?? 0) < configuration.maxInFlightPerWebhook,
            let tenantId = s.queued[webhookId]?.first?.target.webhook.tenantId
          else { continue }
          guard (s.tenantInFlight[tenantId] ?? 0) < configuration.maxInFlightPerTenant else {
            s.deferred += 1
            continue
          }
          // Popped in place: copying the queue out and back copied every delivery in it.
          guard let next = s.queued[webhookId]?.removeFirst() else { continue }
          if s.queued[webhookId]?.isEmpty == true { s.queued[webhookId] = nil }
          started.append(next)
          s.inFlight[webhookId, default: 0] += 1
          s.tenantInFlight[tenantId, default: 0] += 1
          s.totalInFlight += 1
          progress = true
        }
      }
      return started
    }
  }

  /// POSTs one delivery, frees its slot, and records the attempt with the others that ended
  /// meanwhile (the first task to find no record running commits them, in a loop).
  private func deliver(_ claimed: Claimed) async {
    let outcome = await attempt(claimed)
    let records = state.withLock { s -> Bool in
      let id = claimed.delivery.webhookId
      let left = (s.inFlight[id] ?? 1) - 1
      s.inFlight[id] = left > 0 ? left : nil
      let tenantId = claimed.target.webhook.tenantId
      let tenantLeft = (s.tenantInFlight[tenantId] ?? 1) - 1
      s.tenantInFlight[tenantId] = tenantLeft > 0 ? tenantLeft : nil
      s.totalInFlight -= 1
      guard let outcome else {
        s.release(claimed)
        return false
      }
      s.finished.append(Finished(claimed: claimed, outcome: outcome))
      guard !s.recording else { return false }
      s.recording = true
      return true
    }
    wake()  // a slot is free
    if records { await recordFinished() }
  }

  /// Commits the finished attempts, batch after batch, until none is left.
  private func recordFinished() async {
    while true {
      let batch = state.withLock { s -> [Finished] in
        defer { s.finished = [] }
        if s.finished.isEmpty { s.recording = false }
        return s.finished
      }
      guard !batch.isEmpty else { return }
      var missing = Set<String>()
      var failed = false
      do {
        // notFound ones: their webhook was deleted meanwhile, the deliveries with it.
        missing = try await store.recordDeliveryAttempts(batch.map(\.outcome))
      } catch {
        failed = true
        log.info(
          "webhooks: cannot record attempts",
          [("deliveries", .integer(batch.count)), ("error", .string(error.description))])
      }
      state.withLock { s in
        for finished in batch { s.release(finished.claimed) }
        // Claim again once a webhook of the batch holds less than half its share: claims of
        // about half the share each, not one small claim (and its commit) per batch recorded.
        if batch.contains(where: { (s.held[$0.claimed.delivery.webhookId] ?? 0) < claimBelow }) {
          s.claimWanted = true
        }
      }
      wake()
      guard !failed, let onAttempt else { continue }
      for finished in batch where !missing.contains(finished.outcome.deliveryId) {
        onAttempt(
          AttemptReport(
            delivery: finished.claimed.delivery, attempt: finished.outcome.attempt, state: finished.outcome.state,
            nextAttemptMs: finished.outcome.nextAttemptMs))
      }
    }
  }

  private func wake(fanOut: Bool = false) {
    let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
      if fanOut {
        s.fanOutWanted = true
        s.claimWanted = true
      }
      if let w = s.waiter {
        s.waiter = nil
        return w
      }
      s.wakePending = true
      return nil
    }
    waiter?.resume()
  }

  private func waitForWake() async {
    await withTaskCancellationHandler {
      await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        let now = state.withLock { s -> Bool in
          if s.wakePending || Task.isCancelled {
            s.wakePending = false
            return true
          }
          s.waiter = continuation
          return false
        }
        if now { continuation.resume() }
      }
    } onCancel: {
      wake()
    }
  }

  // MARK: One attempt

  /// POSTs one delivery and answers what to record: the attempt and the delivery's new state;
  /// `nil` when the dispatcher was cancelled meanwhile (the lease brings the delivery back).
  private func attempt(_ claimed: Claimed) async -> DeliveryOutcome? {
    let delivery = claimed.delivery
    let body = Array(delivery.event.wire(cursors).jsonString().utf8)
    guard let attempt = await post(body: body, eventId: delivery.event.event.eventId, to: claimed.target) else {
      return nil
    }
    let (state, next) = nextState(after: attempt, of: delivery)
    return DeliveryOutcome(deliveryId: delivery.deliveryId, attempt: attempt, state: state, nextAttemptMs: next)
  }

  /// The delivery's state after a failed or successful attempt: DELIVERED on 2xx; else PENDING
  /// after a backoff, the last retry at the end of the retry window, then FAILED.
  func nextState(after attempt: DeliveryAttemptRecord, of delivery: DeliveryRecord)
    -> (DeliveryState, Int64?)
  {
    if let status = attempt.httpStatus, (200..<300).contains(status) { return (.delivered, nil) }
    let now = environment.now()
    let deadline = delivery.createdMs + configuration.retryWindow.milliseconds
    guard now < deadline else { return (.failed, nil) }
    let failures = delivery.attempts.count { !(200..<300).contains($0.httpStatus ?? 0) } + 1
    let base = min(
      configuration.initialBackoff.milliseconds << min(failures - 1, 30),
      configuration.maxBackoff.milliseconds)
    let delay = Int64((Double(base) * (0.8 + 0.4 * unitRandom())).rounded())
    return (.pending, min(now + max(delay, 1), deadline))
  }

  /// A number in [0, 1) from the injected randomness.
  private func unitRandom() -> Double {
    let bytes = environment.randomBytes(8)
    let value = bytes.reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
    return Double(value >> 11) / Double(UInt64(1) << 53)
  }

  /// POSTs `body` signed for `target` within the timeout (the poster checks each address it
  /// connects to) and describes the attempt.
  /// - Returns: the attempt; `nil` when the dispatcher was cancelled meanwhile.
  private func post(body: [UInt8], eventId: String, to target: Target) async -> DeliveryAttemptRecord? {
    let clock = environment.wireClock
    let attemptedMs = environment.now()
    let started = clock.monotonicNow
    func failed(_ error: String, status: Int? = nil) -> DeliveryAttemptRecord {
      DeliveryAttemptRecord(
        attemptedMs: attemptedMs, httpStatus: status, error: error,
        durationMs: (clock.monotonicNow - started).milliseconds)
    }
    let headers = [
      ("Content-Type", "application/json"),
      ("User-Agent", configuration.userAgent),
      ("Substatus-Event-Id", eventId),
      (
        "Substatus-Signature",
        target.signer.signatureHeader(timestamp: attemptedMs / 1000, body: body)
      ),
    ]
    switch await postWithTimeout(url: target.url, headers: headers, body: body) {
    case .answered(let response):
      let ok = (200..<300).contains(response.status)
      let duration =
        response.duration > .zero
        ? response.duration.milliseconds : (clock.monotonicNow - started).milliseconds
      return DeliveryAttemptRecord(
        attemptedMs: attemptedMs, httpStatus: response.status,
        error: ok ? nil : "the receiver answered HTTP \(response.status)", durationMs: duration)
    case .timedOut:
      return failed("timeout after \(Self.describe(configuration.timeout))")
    case .failed(let error as OutboundHTTPError) where error.code == .timeout:
      return failed("timeout after \(Self.describe(configuration.timeout))")
    case .failed(let error):
      return failed(Self.describe(error))
    case .cancelled:
      return nil
    }
  }

  private enum PostResult: Sendable {
    case answered(HTTPPostResponse)
    case timedOut
    case failed(any Error)
    /// The dispatcher was cancelled: no attempt to record (the lease brings the delivery back).
    case cancelled
  }

  /// The POST raced against the timeout on the environment's wire clock: the first to finish decides, the
  /// other is cancelled (a hung receiver costs its slot for the timeout, nothing more). On the
  /// system clock with a poster that ends its POSTs at their timeout itself (the libcurl client's
  /// total deadline), the POST runs alone in this task: no timer, no second task (they were about
  /// 5 % of a delivery's CPU, ``PostRace``).
  private func postWithTimeout(url: URL, headers: [(String, String)], body: [UInt8]) async
    -> PostResult
  {
    let (poster, clock, timeout) = (self.poster, environment.wireClock, configuration.timeout)
    if poster.endsPostsAtTheirTimeout, clock is SystemClock {
      do {
        return .answered(try await poster.post(url: url, headers: headers, body: body, timeout: timeout))
      } catch let error as OutboundHTTPError where error.code == .cancelled && Task.isCancelled {
        return .cancelled
      } catch {
        return .failed(error)
      }
    }
    let race = PostRace()
    return await withTaskCancellationHandler {
      await race.run(poster: poster, clock: clock, timeout: timeout, url: url, headers: headers, body: body)
    } onCancel: {
      race.finish(.cancelled)
    }
  }

  /// The two sides of ``postWithTimeout(url:headers:body:)``: the POST in a task, the timeout as work
  /// scheduled on the clock (``SubstatusClock/ServiceClock/schedule(after:_:)``: on the system clock a
  /// Dispatch timer, released as soon as it is cancelled; a sleeping task kept its allocation until
  /// the 10 s were up, so every POST answered in time pinned one for 10 s). The first result resumes
  /// the caller, cancels the other side and lets go of both.
  private final class PostRace: Sendable {
    private struct State {
      var continuation: CheckedContinuation<PostResult, Never>?
      var post: Task<Void, Never>?
      var timeout: (any ScheduledWork)?
      var decided: PostResult?
    }
    private let state = Mutex(State())

    func run(
      poster: any HTTPPoster, clock: any ServiceClock, timeout: Duration, url: URL, headers: [(String, String)],
      body: [UInt8]
    ) async -> PostResult {
      await withCheckedContinuation { (continuation: CheckedContinuation<PostResult, Never>) in
        if let decided = state.withLock({ s -> PostResult? in
          if s.decided == nil { s.continuation = continuation }
          return s.decided
        }) {
          continuation.resume(returning: decided)
          return
        }
        let work = clock.schedule(after: timeout) { self.finish(.timedOut) }
        let post = Task {
          do {
            // The client's total deadline, a little before this one (250 ms: its loop thread may
            // be scheduled late on a loaded machine): on the system clock it is
            // the client that ends a POST at its deadline (closing its connection, counted as a
            // timeout in its metrics); this side then only backs it up (and ends POSTs on a test's
            // manual clock).
            let margin = min(.milliseconds(250), timeout / 10)
            let response = try await poster.post(url: url, headers: headers, body: body, timeout: timeout - margin)
            self.finish(.answered(response))
          } catch {
            self.finish(.failed(error))
          }
        }
        let decided = state.withLock { s -> Bool in
          guard s.decided == nil else { return true }
          (s.post, s.timeout) = (post, work)
          return false
        }
        if decided {
          work.cancel()
          post.cancel()
        }
      }
    }

    func finish(_ result: PostResult) {
      let (continuation, post, timeout) = state.withLock {
        s -> (CheckedContinuation<PostResult, Never>?, Task<Void, Never>?, (any ScheduledWork)?) in
        guard s.decided == nil else { return (nil, nil, nil) }
        s.decided = result
        defer { (s.continuation, s.post, s.timeout) = (nil, nil, nil) }
        return (s.continuation, s.post, s.timeout)
      }
      // Both sides let go before the caller goes on, so nothing of this POST outlives its result.
      timeout?.cancel()
      post?.cancel()
      continuation?.resume(returning: result)
    }
  }

  package static func describe(_ duration: Duration) -> String {
    let ms = duration.milliseconds
    return ms % 1000 == 0 ? "\(ms / 1000) s" : "\(ms) ms"
  }

  /// A connection error, for people.
  package static func describe(_ error: any Error) -> String {
    guard let error = error as? OutboundHTTPError else { return "connection error: \(error)" }
    switch error.code {
    case .addressRefused: return "refused: \(error.message)"
    case .timeout: return "timeout"
    case .connectFailed: return "connection refused"
    case .resolveFailed: return "cannot resolve the host"
    case .connectionLost: return "the connection was closed before an answer"
    case .tlsFailed: return "TLS failure: \(error.message)"
    case .tooLarge: return "the answer is larger than \(maxResponseBytes) bytes"
    case .cancelled: return "cancelled"
    default: return "connection error: \(error.message)"
    }
  }

  // MARK: TestWebhook

  /// Sends a test event (type UNSPECIFIED, no user) to one webhook now, outside the log, and
  /// answers with the attempt (nothing is recorded).
  /// - Throws: `notFound` for an unknown app or webhook (or one of another app);
  ///   `secretUnavailable` when its secret cannot be opened.
  public func test(appId: String, webhookId: String) async throws(StoreError) -> TestResult {
    guard let webhook = try await store.webhooks(appId: appId).first(where: { $0.webhookId == webhookId })
    else { throw StoreError.notFound("webhook", webhookId) }
    let secret = try await store.webhookSigningSecret(webhookId: webhookId)
    guard let url = URL(string: webhook.url) else {
      throw StoreError(.internalError, "webhook \"\(webhookId)\" has an unreadable URL")
    }
    let now = environment.now()
    var event = Substatus_V1_Event()
    event.eventID = "test_" + Hex.encode(environment.randomBytes(12))
    event.appID = appId
    event.occurredMs = now
    event.detectedMs = now
    guard
      let attempt = await post(
        body: Array(event.jsonString().utf8), eventId: event.eventID,
        to: Target(webhook: webhook, url: url, secret: secret))
    else { throw StoreError(.unavailable, "the test of webhook \"\(webhookId)\" was cancelled") }
    return TestResult(
      attempt: attempt, delivered: attempt.httpStatus.map { (200..<300).contains($0) } ?? false)
  }
}
