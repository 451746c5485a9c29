import RPCCore
import SubstatusClient
import SubstatusWire

/// The commands of issue #21 (events out): the event log, its live stream, webhooks.
let eventCommands: [CommandSpec] = [
  CommandSpec(
    words: ["events", "list"], positionals: ["APP"],
    options: [
      OptionSpec(name: "--user", value: "USER", help: "only this user's events"),
      OptionSpec(name: "--type", value: "TYPE,...", help: "only these types (RENEWED, EXPIRED, ...)"),
      OptionSpec(name: "--since", value: "CURSOR", help: "after this cursor (the CURSOR column, or the last line)"),
      OptionSpec(name: "--limit", value: "N", help: "at most N events (1 to 1000; default 100)"),
    ],
    summary: "list the app's events in log order",
    details:
      "Types are the EventType names without EVENT_TYPE_: " + eventTypeNames.joined(separator: ", ")
      + ".\nThe last line gives the cursor to continue from (--since)."),
  CommandSpec(
    words: ["events", "tail"], positionals: ["APP"],
    options: [
      OptionSpec(name: "--since", value: "CURSOR", help: "start after this cursor (default: from now on)")
    ],
    summary: "stream the app's events as they are written, until interrupted (Ctrl-C exits 0)",
    details: "One line per event (one JSON object per line with --json); no deadline applies."),
  CommandSpec(
    words: ["events", "replay"], positionals: ["APP"],
    options: [
      OptionSpec(name: "--since", value: "CURSOR", help: "replay the events after this cursor", required: true),
      OptionSpec(name: "--webhook", value: "WEBHOOK_ID", help: "only to this webhook (default: every webhook)"),
    ],
    summary: "deliver the app's events after a cursor again to its webhooks (failed ones included)",
    details: "Receivers that deduplicate by Substatus-Event-Id see no change. Pass --since '' for the whole log."),
  CommandSpec(
    words: ["webhook", "add"], positionals: ["APP"],
    options: [
      OptionSpec(name: "--url", value: "URL", help: "https:// or http:// URL events are POSTed to", required: true),
      OptionSpec(name: "--events", value: "TYPE,...", help: "only these types (default: all)"),
      OptionSpec(
        name: "--environment", value: "production|sandbox", help: "only events of this environment (default: both)"),
    ],
    summary: "subscribe a URL to the app's events; prints the webhook id and its signing secret (once)",
    details:
      "Each POST carries Substatus-Event-Id and Substatus-Signature: t=<unix seconds>,v1=<hex\nHMAC-SHA256(secret, \"<t>.<body>\")>. The secret is shown only now.\n"
      + "Types are the EventType names without EVENT_TYPE_: " + eventTypeNames.joined(separator: ", ") + "."),
  CommandSpec(
    words: ["webhook", "list"], positionals: ["APP"], options: [], summary: "list the app's webhooks"),
  CommandSpec(
    words: ["webhook", "remove"], positionals: ["APP", "WEBHOOK_ID"], options: [],
    summary: "remove a webhook and its pending deliveries"),
  CommandSpec(
    words: ["webhook", "test"], positionals: ["APP", "WEBHOOK_ID"], options: [],
    summary: "send a test event to a webhook now and show the attempt"),
  CommandSpec(
    words: ["webhook", "deliveries"], positionals: ["APP", "WEBHOOK_ID"],
    options: [OptionSpec(name: "--failed", value: nil, help: "only deliveries given up after 3 days of retries")],
    summary: "list a webhook's deliveries, newest first, with their attempts",
    details:
      "One line per attempt (oldest first within a delivery; a delivery not tried yet has one line\n"
      + "with '-'): its HTTP status or error and how long the receiver took."),
]

/// The event type names of the command line: the enum names without `EVENT_TYPE_`.
let eventTypeNames: [String] = Substatus_V1_EventType.allCases.filter { $0 != .unspecified }.map {
  Format.name($0, prefix: "EVENT_TYPE_")
}

/// Runs a command of ``eventCommands``; `nil` for any other command.
func executeEvents(_ command: CommandSpec, _ context: CommandContext) async throws -> String? {
  let client = context.client
  switch command.name {
  case "events list":
    let types = try eventTypes(context, "--type")
    let limit = try context.integer("--limit", atLeast: 1) ?? 0
    guard limit <= 1000 else { throw UsageError(message: "--limit is at most 1000", command: command.name) }
    let response = try await client.listEvents(
      appID: context.argument(0), userID: context.parsed.value("--user") ?? "", types: types,
      sinceCursor: context.parsed.value("--since") ?? "", limit: Int32(limit))
    return render(context, response) { report in
      report.table(
        ["OCCURRED", "TYPE", "USER", "PRODUCT", "STATE", "EVENT ID", "CURSOR"], response.events.map(eventRow),
        empty: "no events")
      report.line("next cursor: \(response.nextCursor)")
    }

  case "events tail":
    let stream = try await client.watchEvents(
      appID: context.argument(0), sinceCursor: context.parsed.value("--since") ?? "")
    if !context.json {
      context.environment.standardOutput(
        formatColumns([["OCCURRED", "TYPE", "USER", "PRODUCT", "STATE", "EVENT ID", "CURSOR"]]))
    }
    for try await message in stream {
      let event = message.event ?? Substatus_V1_Event()
      if context.json {
        context.environment.standardOutput(event.jsonValue().serialized() + "\n")
      } else {
        context.environment.standardOutput(eventRow(event).map(TerminalText.visible).joined(separator: "  ") + "\n")
      }
    }
    return ""

  case "events replay":
    let response = try await client.replayEvents(
      appID: context.argument(0), sinceCursor: context.parsed.value("--since") ?? "",
      webhookID: context.parsed.value("--webhook") ?? "")
    return render(context, response) { $0.line("deliveries created: \(response.deliveriesCreated)") }

  case "webhook add":
    let response = try await client.createWebhook(
      appID: context.argument(0), url: context.parsed.value("--url") ?? "",
      eventTypes: try eventTypes(context, "--events"), environment: try context.environmentFlag())
    return render(context, response) { report in
      report.fields(webhookFields(response.webhook ?? Substatus_V1_Webhook()) + [("signing secret", response.signingSecret)])
      report.gap()
      report.line("The signing secret is shown only now: store it with your receiver.")
    }

  case "webhook list":
    let response = try await client.listWebhooks(appID: context.argument(0))
    return render(context, response) { report in
      report.table(
        ["WEBHOOK", "URL", "EVENTS", "ENVIRONMENT", "SECRET", "CREATED"],
        response.webhooks.map { hook in
          [
            hook.webhookID, hook.url, eventTypeList(hook.eventTypes), environmentFilter(hook.environment),
            hook.secretFingerprint, Format.time(hook.createdMs),
          ]
        }, empty: "no webhooks")
    }

  case "webhook remove":
    let response = try await client.deleteWebhook(appID: context.argument(0), webhookID: context.argument(1))
    return render(context, response) { $0.line("removed \(context.argument(1))") }

  case "webhook test":
    let response = try await client.testWebhook(appID: context.argument(0), webhookID: context.argument(1))
    let output = render(context, response) { report in
      report.fields([("delivered", Format.yesNo(response.delivered))] + attemptFields(response.attempt ?? Substatus_V1_DeliveryAttempt()))
    }
    guard response.delivered else {
      context.environment.standardOutput(output)
      throw CommandFailure(message: "the receiver did not answer 2xx")
    }
    return output

  case "webhook deliveries":
    var all = Substatus_V1_ListDeliveriesResponse()
    var token = ""
    repeat {
      let page = try await client.listDeliveries(
        appID: context.argument(0), webhookID: context.argument(1), failedOnly: context.parsed.has("--failed"),
        pageSize: 1000, pageToken: token)
      all.deliveries += page.deliveries
      token = page.nextPageToken
    } while !token.isEmpty
    return render(context, all) { report in
      report.table(
        ["DELIVERY", "EVENT ID", "TYPE", "USER", "STATE", "NEXT ATTEMPT", "#", "ATTEMPTED", "RESULT", "DURATION"],
        all.deliveries.flatMap { delivery -> [[String]] in
          let event = delivery.event ?? Substatus_V1_Event()
          let columns = [
            delivery.deliveryID, event.eventID, Format.name(event.type, prefix: "EVENT_TYPE_"),
            Format.orDash(event.userID), Format.name(delivery.state, prefix: "DELIVERY_STATE_"),
            delivery.state == .pending ? Format.time(delivery.nextAttemptMs) : "-",
          ]
          guard !delivery.attempts.isEmpty else { return [columns + ["-", "-", "-", "-"]] }
          return delivery.attempts.enumerated().map { n, attempt in
            columns + [
              String(n + 1), Format.time(attempt.attemptedMs), attemptResult(attempt), "\(attempt.durationMs) ms",
            ]
          }
        }, empty: "no deliveries")
    }

  default:
    return nil
  }
}

/// A comma-separated list of event type names in `flag` (`RENEWED,EXPIRED`; the full
/// `EVENT_TYPE_` names are accepted too, in any case).
private func eventTypes(_ context: CommandContext, _ flag: String) throws(UsageError) -> [Substatus_V1_EventType] {
  guard let text = context.parsed.value(flag) else { return [] }
  var types: [Substatus_V1_EventType] = []
  for word in text.split(separator: ",", omittingEmptySubsequences: true) {
    var name = word.trimmingCharacters(in: .whitespaces).uppercased()
    if name.hasPrefix("EVENT_TYPE_") { name.removeFirst("EVENT_TYPE_".count) }
    guard let type = Substatus_V1_EventType(protoName: "EVENT_TYPE_" + name), type != .unspecified else {
      throw UsageError(
        message: "\(flag): unknown event type '\(word)'; one of \(eventTypeNames.joined(separator: ", "))",
        command: context.command.name)
    }
    types.append(type)
  }
  guard !types.isEmpty else { throw UsageError(message: "\(flag) needs at least one type", command: context.command.name) }
  return types
}

/// An attempt's outcome for people: `HTTP 204`, or the error (`connection refused`, `timeout
/// after 10 s`) when no status was answered.
private func attemptResult(_ attempt: Substatus_V1_DeliveryAttempt) -> String {
  attempt.httpStatus != 0 ? "HTTP \(attempt.httpStatus)" : Format.orDash(attempt.error)
}

/// A webhook's environment filter: `both`, `production` or `sandbox`.
private func environmentFilter(_ environment: Substatus_V1_Environment) -> String {
  environment == .unspecified ? "both" : Format.name(environment, prefix: "ENVIRONMENT_").lowercased()
}

private func eventTypeList(_ types: [Substatus_V1_EventType]) -> String {
  types.isEmpty ? "all" : types.map { Format.name($0, prefix: "EVENT_TYPE_") }.joined(separator: ",")
}

private func eventRow(_ event: Substatus_V1_Event) -> [String] {
  [
    Format.time(event.occurredMs), Format.name(event.type, prefix: "EVENT_TYPE_"), Format.orDash(event.userID),
    Format.orDash(event.productID),
    "\(Format.name(event.stateBefore, prefix: "SUBSCRIPTION_STATE_"))→\(Format.name(event.stateAfter, prefix: "SUBSCRIPTION_STATE_"))",
    event.eventID, event.cursor,
  ]
}

private func webhookFields(_ hook: Substatus_V1_Webhook) -> [(String, String)] {
  [
    ("webhook id", hook.webhookID), ("url", hook.url), ("events", eventTypeList(hook.eventTypes)),
    ("environment", environmentFilter(hook.environment)), ("secret fingerprint", hook.secretFingerprint),
    ("created", Format.time(hook.createdMs)),
  ]
}

private func attemptFields(_ attempt: Substatus_V1_DeliveryAttempt) -> [(String, String)] {
  [
    ("attempted", Format.time(attempt.attemptedMs)),
    ("http status", attempt.httpStatus == 0 ? "-" : String(attempt.httpStatus)),
    ("error", Format.orDash(attempt.error)), ("duration", "\(attempt.durationMs) ms"),
  ]
}
