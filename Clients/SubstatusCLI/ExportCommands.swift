import Foundation
import RPCCore
import SubstatusClient
import SubstatusWire

/// `substatus export events`: the app's event log as it is, for warehouses (docs/architecture.md
/// "The CLI contract").
let exportCommands: [CommandSpec] = [
  CommandSpec(
    words: ["export", "events"], positionals: ["APP"],
    options: [
      OptionSpec(name: "--since", value: "CURSOR", help: "after this cursor (default: from the log's start)"),
      OptionSpec(name: "--format", value: "ndjson|csv", help: "one JSON object per line (default) or CSV with a header"),
    ],
    summary: "write the app's whole event log, in log order, to standard output as it is read",
    details:
      "ndjson: each event in the API's proto3 JSON, one per line. csv: the columns "
      + EventExport.columns.map(\.name).joined(separator: ", ")
      + "\n(enums as their names without prefix, instants in milliseconds and as UTC ISO-8601, RFC 4180 quoting).\n"
      + "Pages of \(EventExport.pageSize) events are written as they arrive; standard error ends with the cursor\n"
      + "to pass as --since next time, so a warehouse can export only what is new."),
]

/// Runs a command of ``exportCommands``; `nil` for any other command.
func executeExport(_ command: CommandSpec, _ context: CommandContext) async throws -> String? {
  guard command.name == "export events" else { return nil }
  if context.json {
    throw UsageError(message: "--json does not apply: choose --format ndjson or csv", command: command.name)
  }
  let format = try context.choice("--format", ["ndjson", "csv"]) ?? "ndjson"
  let appID = context.argument(0)
  let write = context.environment.standardOutput
  if format == "csv" { write(EventExport.csvHeader) }
  var cursor = context.parsed.value("--since") ?? ""
  var exported = 0
  while true {
    let page = try await context.client.listEvents(appID: appID, sinceCursor: cursor, limit: EventExport.pageSize)
    guard !page.events.isEmpty else {
      // An empty page is the log's end as scanned; its cursor is where the next export starts.
      if !page.nextCursor.isEmpty { cursor = page.nextCursor }
      break
    }
    var text = ""
    for event in page.events {
      text += format == "csv" ? EventExport.csvRow(event) : event.jsonValue().serialized() + "\n"
    }
    write(text)
    exported += page.events.count
    guard page.nextCursor != cursor else { break }
    cursor = page.nextCursor
  }
  context.environment.standardError(
    "substatus: exported \(exported) event\(exported == 1 ? "" : "s"); continue with --since '\(cursor)'\n")
  return ""
}

/// The event log's export formats.
enum EventExport {
  /// Events per ListEvents call (the API's largest page).
  static let pageSize: Int32 = 1000

  /// A CSV column: its header and its cell of an event.
  struct Column: Sendable {
    let name: String
    let cell: @Sendable (Substatus_V1_Event) -> String
  }

  /// Every field of `Event`, in the proto's order, with the two instants also in ISO-8601.
  static let columns: [Column] = [
    Column(name: "event_id") { $0.eventID },
    Column(name: "cursor") { $0.cursor },
    Column(name: "app_id") { $0.appID },
    Column(name: "user_id") { $0.userID },
    Column(name: "environment") { Format.environment($0.environment) },
    Column(name: "type") { Format.name($0.type, prefix: "EVENT_TYPE_") },
    Column(name: "occurred_ms") { String($0.occurredMs) },
    Column(name: "occurred") { $0.occurredMs == 0 ? "" : Format.time($0.occurredMs) },
    Column(name: "detected_ms") { String($0.detectedMs) },
    Column(name: "detected") { $0.detectedMs == 0 ? "" : Format.time($0.detectedMs) },
    Column(name: "subscription_group_id") { $0.subscriptionGroupID },
    Column(name: "product_id") { $0.productID },
    Column(name: "transaction_id") { $0.transactionID },
    Column(name: "original_transaction_id") { $0.originalTransactionID },
    Column(name: "state_before") { enumCell($0.stateBefore, prefix: "SUBSCRIPTION_STATE_") },
    Column(name: "state_after") { enumCell($0.stateAfter, prefix: "SUBSCRIPTION_STATE_") },
    Column(name: "offer") { enumCell($0.offer, prefix: "EVENT_OFFER_") },
    Column(name: "offer_id") { $0.offerID },
    Column(name: "price_milliunits") { $0.priceMilliunits == 0 && $0.currency.isEmpty ? "" : String($0.priceMilliunits) },
    Column(name: "currency") { $0.currency },
    Column(name: "expiration_reason") { $0.expirationReason },
    Column(name: "previous_product_id") { $0.previousProductID },
    Column(name: "previous_user_id") { $0.previousUserID },
    Column(name: "ownership") { enumCell($0.ownership, prefix: "OWNERSHIP_TYPE_") },
    Column(name: "consumption_body") { $0.consumptionBody },
    Column(name: "consumption_detail") { $0.consumptionDetail },
    Column(name: "refund_request_reason") { $0.refundRequestReason },
  ]

  /// The header line.
  static let csvHeader = columns.map(\.name).joined(separator: ",") + "\r\n"

  /// One event's line.
  static func csvRow(_ event: Substatus_V1_Event) -> String {
    columns.map { csvField($0.cell(event)) }.joined(separator: ",") + "\r\n"
  }

  /// RFC 4180: a field holding a comma, a quote or a line break is quoted, its quotes doubled.
  static func csvField(_ text: String) -> String {
    guard text.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) else { return text }
    return "\"" + text.replacingOccurrences(of: "\"", with: "\"\"") + "\""
  }

  /// An enum's name without its prefix; empty for the unset value.
  private static func enumCell<E: ProtobufEnum>(_ value: E, prefix: String) -> String {
    value.rawValue == 0 ? "" : Format.name(value, prefix: prefix)
  }
}
