import Foundation
import RPCCore
import SubstatusClient
import SubstatusWire

/// The commands of the Apple Account behind a user (docs/architecture.md rule 24).
let appAccountCommands: [CommandSpec] = [
  CommandSpec(
    words: ["app-transaction", "submit"], positionals: ["APP", "USER"],
    options: [
      OptionSpec(
        name: "--file", value: "SIGNED_APP_TRANSACTION.jws",
        help: "the signed AppTransaction (compact JWS) the device's StoreKit gave the app; - for standard input",
        required: true)
    ],
    summary: "link the user to their Apple Account (signed AppTransaction); syncs its history with the app's key",
    details:
      "The JWS is verified like all signed data. With the app's In-App Purchase key the server fetches\nthe account's whole history from the App Store Server API by its appTransactionId, and then\nanswers an introductory offer the account never used as NEW_CUSTOMER_VERIFIED."),
]

/// Runs a command of ``appAccountCommands``; `nil` for any other command.
func executeAppAccount(_ command: CommandSpec, _ context: CommandContext) async throws -> String? {
  switch command.name {
  case "app-transaction submit":
    let bytes = try context.read(context.parsed.value("--file") ?? "-", what: "the signed AppTransaction")
    guard let text = String(validating: bytes, as: UTF8.self) else {
      throw UsageError(message: "the signed AppTransaction is not UTF-8 text", command: command.name)
    }
    let jws = text.trimmingCharacters(in: .whitespacesAndNewlines)
    guard !jws.isEmpty else { throw UsageError(message: "the signed AppTransaction is empty", command: command.name) }
    let response = try await context.client.submitAppTransaction(
      appID: context.argument(0), userID: context.argument(1), signedAppTransaction: jws)
    return render(context, response) { report in
      report.fields([
        ("user", response.userID), ("environment", Format.environment(response.environment)),
        ("apple account", response.appTransactionID),
        ("app first got", response.originalPurchaseDateMs == 0 ? "-" : Format.time(response.originalPurchaseDateMs)),
        ("first version", Format.orDash(response.originalApplicationVersion)),
        ("history", response.historyVerified ? "verified with Apple" : "not verified with Apple"),
        ("transactions", "\(response.transactionCount) from Apple (\(response.storedTransactionCount) new or changed)"),
        ("as of", Format.time(response.asOfMs)),
      ])
      refusedTable(&report, response.refusedOriginalTransactions)
      statusTables(&report, response.groups, response.entitlements)
    }
  default:
    return nil
  }
}
