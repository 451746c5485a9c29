import RPCCore
import SubstatusClient
import SubstatusWire

/// The kept notifications of rule 25 (docs/architecture.md "Domain rules"): every verified App
/// Store Server Notification V2, as Apple sent it.
let notificationCommands: [CommandSpec] = [
  CommandSpec(
    words: ["notification", "list"], positionals: ["APP"],
    options: [
      OptionSpec(name: "--type", value: "TYPE", help: "only this Apple notificationType (DID_RENEW, REFUND, ...)"),
      OptionSpec(name: "--since", value: "YYYY-MM-DD|MS", help: "only those received at or after this (UTC day or UNIX ms)"),
      OptionSpec(name: "--until", value: "YYYY-MM-DD|MS", help: "only those received before this (UTC day or UNIX ms)"),
      OptionSpec(name: "--limit", value: "N", help: "at most N notifications (1 to 10000; default 100)"),
    ],
    summary: "list the app's kept V2 notifications, oldest received first",
    details:
      "Kept until substatusd's --keep-notifications-days (default 180) prunes them. With --json the\n"
      + "response is ListKeptNotificationsResponse, each notification with its signedPayload whole;\n"
      + "nextPageToken is set when --limit stopped the listing early."),
]

/// Runs a command of ``notificationCommands``; `nil` for any other command.
func executeNotifications(_ command: CommandSpec, _ context: CommandContext) async throws -> String? {
  switch command.name {
  case "notification list":
    let limit = try context.integer("--limit", atLeast: 1) ?? 100
    guard limit <= 10_000 else { throw UsageError(message: "--limit is at most 10000", command: command.name) }
    let since = try instant(context, "--since")
    let until = try instant(context, "--until")
    var all = Substatus_V1_ListKeptNotificationsResponse()
    var token = ""
    repeat {
      let page = try await context.client.listKeptNotifications(
        appID: context.argument(0), notificationType: context.parsed.value("--type") ?? "",
        receivedFromMs: since ?? 0, receivedBeforeMs: until ?? 0,
        pageSize: Int32(min(1000, Int(limit) - all.notifications.count)), pageToken: token)
      all.notifications += page.notifications
      token = page.nextPageToken
    } while !token.isEmpty && all.notifications.count < Int(limit)
    all.nextPageToken = token
    return render(context, all) { report in
      report.table(
        ["RECEIVED", "TYPE", "SUBTYPE", "ENVIRONMENT", "SIGNED", "NOTIFICATION UUID"],
        all.notifications.map { n in
          [
            Format.time(n.receivedMs), n.notificationType, Format.orDash(n.subtype),
            n.environment == .sandbox ? "sandbox" : "production",
            n.signedDateMs == 0 ? "-" : Format.time(n.signedDateMs), n.notificationUUID,
          ]
        }, empty: "no notifications")
      if !token.isEmpty { report.line("more: raise --limit or narrow --since/--until") }
    }

  default:
    return nil
  }
}

/// A `YYYY-MM-DD` (UTC midnight) or UNIX-milliseconds flag value; `nil` when the flag is absent.
private func instant(_ context: CommandContext, _ flag: String) throws(UsageError) -> Int64? {
  guard let text = context.parsed.value(flag) else { return nil }
  if let day = Format.midnight(ofDate: text) { return day }
  if let ms = Int64(text), ms > 0 { return ms }
  throw UsageError(message: "\(flag) needs a date YYYY-MM-DD or UNIX milliseconds, not '\(text)'", command: context.command.name)
}
