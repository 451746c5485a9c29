import Foundation
import SubscriptionDomain
import SubstatusJSON

/// How the SQL stores keep a delivery's event (the log's compact binary payload; rows written
/// before it hold JSON, still read) and attempts (JSON) in its row, a webhook's types
/// (comma-separated raw values) and delivery ids (`dlv_` and the row's key, zero-padded).
public enum WebhookRowCoding {
  private struct Attempt: Decodable {
    var at: Int64
    var status: Int?
    var error: String?
    var ms: Int64
  }

  /// The event as stored in a delivery: the event log's binary payload (read on every claim, so
  /// it must be cheap to decode; JSON through Foundation cost tens of µs per delivery).
  public static func encode(_ event: SubscriptionEvent) -> [UInt8] { PayloadCodec.encode(event) }

  /// An event from its stored form: the binary payload, or the JSON that rows written before it
  /// hold (they start with `{`; the payload starts with its format byte).
  /// - Throws: `corrupt`.
  public static func decodeEvent(_ bytes: [UInt8]) throws(StoreError) -> SubscriptionEvent {
    guard bytes.first == UInt8(ascii: "{") else { return try PayloadCodec.decodeEvent(bytes) }
    do { return try JSONDecoder().decode(SubscriptionEvent.self, from: Data(bytes)) } catch {
      throw StoreError(.corrupt, "a delivery's event cannot be read: \(error)")
    }
  }

  /// The attempts as a JSON array of `{"at":…,"status":…,"error":…,"ms":…}` (an absent status or
  /// error left out), written with ``SubstatusJSON/JSONValue`` (each recorded attempt is encoded
  /// once; Foundation's `JSONEncoder` cost about 1.5 % of a webhook POST's CPU).
  public static func encode(_ attempts: [DeliveryAttemptRecord]) -> [UInt8] {
    JSONValue.array(
      attempts.map { attempt in
        var members: [(key: String, value: JSONValue)] = [("at", .integer(attempt.attemptedMs))]
        if let status = attempt.httpStatus { members.append(("status", .integer(status))) }
        if let error = attempt.error { members.append(("error", .string(error))) }
        members.append(("ms", .integer(attempt.durationMs)))
        return .object(JSONObject(members))
      }
    ).serializedBytes()
  }

  /// Attempts from their JSON array.
  /// - Throws: `corrupt`.
  public static func decodeAttempts(_ bytes: [UInt8]) throws(StoreError) -> [DeliveryAttemptRecord] {
    // A delivery not tried yet (every first claim): no decoder for "[]".
    if bytes.filter({ !isSpace($0) }) == Array("[]".utf8) { return [] }
    do {
      return try JSONDecoder().decode([Attempt].self, from: Data(bytes)).map {
        DeliveryAttemptRecord(attemptedMs: $0.at, httpStatus: $0.status, error: $0.error, durationMs: $0.ms)
      }
    } catch {
      throw StoreError(.corrupt, "a delivery's attempts cannot be read: \(error)")
    }
  }

  private static func isSpace(_ byte: UInt8) -> Bool {
    byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09
  }

  /// A webhook's types as stored: raw values, sorted, comma-separated (empty: all).
  public static func types(_ types: Set<SubscriptionEventType>) -> String {
    types.map(\.rawValue).sorted().joined(separator: ",")
  }

  /// A webhook's types from their stored form.
  public static func types(_ text: String) -> Set<SubscriptionEventType> {
    Set(text.split(separator: ",").compactMap { SubscriptionEventType(rawValue: String($0)) })
  }

  /// A batch of attempt records as one JSON array, for a store that records them in one statement
  /// (PostgreSQL's `jsonb_to_recordset`): per outcome `{"key": row key, "attempt": the attempt as
  /// a one-element JSON array (``encode(_:)-([DeliveryAttemptRecord])``), "state": …, "next": due
  /// time or null}`; outcomes whose delivery id no store made are left out.
  public static func outcomesJSON(_ outcomes: [DeliveryOutcome]) -> String {
    JSONValue.array(
      outcomes.compactMap { outcome in
        guard let key = deliveryKey(outcome.deliveryId) else { return nil }
        return .object(
          JSONObject([
            ("key", .integer(key)),
            ("attempt", .string(String(decoding: encode([outcome.attempt]), as: UTF8.self))),
            ("state", .string(outcome.state.rawValue)),
            ("next", outcome.storedNextAttemptMs.map { .integer($0) } ?? .null),
          ]))
      }
    ).serialized()
  }

  /// New deliveries of `events` (in log order) for one statement: `[sequence, environment, user,
  /// first]` each, `first` 1 for a user's first event of the batch (only it may be the head).
  public static func newDeliveriesJSON(_ events: [LoggedEvent]) -> String {
    var seen = Set<UserKey>()
    seen.reserveCapacity(events.count)
    return JSONValue.array(
      events.map { logged in
        let event = logged.event
        let first = seen.insert(UserKey(environment: event.environment, userId: event.userId)).inserted
        return .array([
          .integer(logged.sequence), .string(event.environment.rawValue), .string(event.userId),
          .integer(first ? 1 : 0),
        ])
      }
    ).serialized()
  }

  private struct UserKey: Hashable {
    var environment: Environment
    var userId: String
  }

  /// A webhook's environment filter as stored: the environment's raw value, empty for both.
  public static func environment(_ environment: Environment?) -> String { environment?.rawValue ?? "" }

  /// A webhook's environment filter from its stored form (empty, or a value no build knows: both).
  public static func environment(_ text: String) -> Environment? { Environment(rawValue: text) }

  /// The delivery id of a row key: `dlv_` and 12 digits.
  public static func deliveryId(_ key: Int64) -> String {
    let digits = String(key)
    return "dlv_" + String(repeating: "0", count: max(0, 12 - digits.count)) + digits
  }

  /// The row key of a delivery id; `nil` for a string no store made.
  public static func deliveryKey(_ id: String) -> Int64? {
    guard id.hasPrefix("dlv_") else { return nil }
    return Int64(id.dropFirst(4))
  }
}

