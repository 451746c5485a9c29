import SubstatusJSON
import Testing

@testable import SubscriptionDomain

/// A deterministic 32-byte digest for tests (four FNV-1a-64 lanes with different offsets): the
/// domain takes its hash from the caller; the service passes SHA-256.
func testDigest(_ bytes: [UInt8]) -> [UInt8] {
  var out: [UInt8] = []
  for lane in UInt64(0)..<4 {
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325 &+ lane &* 0x9E37_79B9_7F4A_7C15
    for byte in bytes {
      hash ^= UInt64(byte)
      hash = hash &* 0x0000_0100_0000_01B3
    }
    for shift in stride(from: 56, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: hash >> UInt64(shift))) }
  }
  return out
}

let derivation = EventDerivation(digest: testDigest)
let subject = EventSubject(appId: "app1", environment: .production, userId: "user1")

/// What a store does with derived events: keeps the merged data and a log deduplicated by id,
/// derives on every write and runs the scheduler's call on ticks.
struct EventLogModel {
  var catalog = Fixture.catalog
  var history = PurchaseHistory.empty
  var log: [SubscriptionEvent] = []
  var ids = Set<String>()
  var loggedThroughMs: Int64?

  /// One write: merges the data as a store does, appends the new events; returns them.
  @discardableResult
  mutating func write(
    _ transactions: [Transaction] = [], _ renewals: [RenewalInfo] = [], at time: Int64
  ) -> [SubscriptionEvent] {
    let before = history
    var after = before
    after.transactions = Transaction.merged(before.transactions + transactions)
    after.renewals = RenewalInfo.merged(before.renewals + renewals)
    let events = derivation.events(
      subject: subject, before: before, after: after, catalog: catalog, throughMs: time,
      loggedThroughMs: loggedThroughMs, detectedMs: time)
    history = after
    let through = max(loggedThroughMs ?? time, time)
    // A store's call (one timeline where it can) says the same as the two calls.
    let write = derivation.write(
      subject: subject, before: before, after: after, catalog: catalog, throughMs: time,
      loggedThroughMs: loggedThroughMs, detectedMs: time, nextAfterMs: through)
    #expect(write.events == events)
    #expect(write.nextTransitionMs == EventDerivation.nextTransitionMs(history: after, catalog: catalog, afterMs: through))
    loggedThroughMs = through
    return append(events)
  }

  /// The scheduler's run at `time`.
  @discardableResult
  mutating func tick(at time: Int64) -> [SubscriptionEvent] {
    let events = derivation.transitionEvents(
      subject: subject, history: history, catalog: catalog, afterMs: loggedThroughMs ?? .min,
      throughMs: time, detectedMs: time)
    loggedThroughMs = max(loggedThroughMs ?? time, time)
    return append(events)
  }

  var nextTransitionMs: Int64? {
    EventDerivation.nextTransitionMs(history: history, catalog: catalog, afterMs: loggedThroughMs ?? .min)
  }

  private mutating func append(_ events: [SubscriptionEvent]) -> [SubscriptionEvent] {
    let new = events.filter { ids.insert($0.eventId).inserted }
    log += new
    return new
  }
}

/// Reads a lifecycle fixture's times: `"@2024-01-08"`, `"@2024-01-08T12:30"`, optionally followed by
/// `+<n>ms`, become milliseconds (numbers), everywhere in the document.
func resolvingTimes(_ value: JSONValue) -> JSONValue {
  switch value {
  case .string(let text) where text.hasPrefix("@"):
    return .number(String(parseFixtureTime(text)))
  case .array(let elements): return .array(elements.map(resolvingTimes))
  case .object(let object): return .object(JSONObject(object.map { ($0.key, resolvingTimes($0.value)) }))
  default: return value
  }
}

func parseFixtureTime(_ text: String) -> Int64 {
  var body = Substring(text.dropFirst())
  var extra: Int64 = 0
  if let plus = body.firstIndex(of: "+") {
    extra = Int64(body[body.index(after: plus)...].dropLast(2)) ?? 0
    body = body[..<plus]
  }
  let parts = body.split(whereSeparator: { $0 == "-" || $0 == "T" || $0 == ":" }).map { Int($0) ?? 0 }
  let hour = parts.count > 3 ? parts[3] : 0
  let minute = parts.count > 4 ? parts[4] : 0
  let second = parts.count > 5 ? parts[5] : 0
  return utc(parts[0], parts[1], parts[2], hour, minute) + Int64(second) * 1000 + extra
}
