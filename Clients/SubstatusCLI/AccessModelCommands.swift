import Foundation
import RPCCore
import SubstatusClient
import SubstatusWire

/// The commands of issue #20 (access model): named entitlements, product deletion, erasure.
let accessModelCommands: [CommandSpec] = [
  CommandSpec(
    words: ["entitlement", "put"], positionals: ["APP"],
    options: [
      OptionSpec(
        name: "--file", value: "ENTITLEMENTS.json",
        help: "{\"entitlements\":[EntitlementDefinition in proto3 JSON, ...]}; - for stdin",
        required: true)
    ],
    summary: "insert or replace named entitlements (each lists the catalog products that grant it)",
    details:
      "Example:\n  {\"entitlements\":[{\"entitlementId\":\"premium\",\"displayName\":\"Premium\",\n    \"productIds\":[\"premium.monthly\",\"premium.yearly\",\"pro.lifetime\"]}]}\nEvery product must be in the app's catalog; entitlements not listed stay as they are."
  ),
  CommandSpec(
    words: ["entitlement", "list"], positionals: ["APP"], options: [],
    summary: "list the app's named entitlements"),
  CommandSpec(
    words: ["entitlement", "delete"], positionals: ["APP", "ENTITLEMENT..."], options: [],
    summary: "delete named entitlements; prints those that were defined"),
  CommandSpec(
    words: ["product", "delete"], positionals: ["APP", "PRODUCT..."], options: [],
    summary: "delete products from the catalog (and from the entitlements that list them)",
    details:
      "Users' transactions of the products stay in their history; they are then evaluated as\nproducts the catalog lacks."
  ),
  CommandSpec(
    words: ["user", "delete"], positionals: ["APP", "USER"], options: [],
    summary: "erase the user's data in every environment (transactions, renewal infos, receipts)",
    details:
      "Irreversible. The audit log records the erasure with a SHA-256 of the user id, never the id."
  ),
]

/// Runs a command of ``accessModelCommands``; `nil` for any other command.
func executeAccessModel(_ command: CommandSpec, _ context: CommandContext) async throws -> String? {
  let client = context.client
  switch command.name {
  case "entitlement put":
    let path = context.parsed.value("--file") ?? "-"
    let bytes = try context.read(path, what: "the entitlements")
    let file: Substatus_V1_PutEntitlementsResponse
    do throws(WireError) {
      guard let text = String(validating: bytes, as: UTF8.self) else {
        throw WireError(code: .invalidJSON, message: "not UTF-8 text")
      }
      file = try Substatus_V1_PutEntitlementsResponse(jsonString: text)
    } catch {
      throw UsageError(
        message:
          "\(path == "-" ? "standard input" : path) is not {\"entitlements\":[...]}: \(error.message)",
        command: command.name)
    }
    guard !file.entitlements.isEmpty else {
      throw UsageError(message: "the file lists no entitlements", command: command.name)
    }
    let response = try await client.putEntitlements(
      appID: context.argument(0), entitlements: file.entitlements)
    return render(context, response) { entitlementDefinitionTable(&$0, response.entitlements) }

  case "entitlement list":
    var all = Substatus_V1_ListEntitlementsResponse()
    var token = ""
    repeat {
      let page = try await client.listEntitlements(
        appID: context.argument(0), pageSize: 1000, pageToken: token)
      all.entitlements += page.entitlements
      token = page.nextPageToken
    } while !token.isEmpty
    return render(context, all) { entitlementDefinitionTable(&$0, all.entitlements) }

  case "entitlement delete":
    let response = try await client.deleteEntitlements(
      appID: context.argument(0), entitlementIDs: Array(context.parsed.positionals.dropFirst()))
    return render(context, response) { report in
      if response.deletedEntitlementIDs.isEmpty {
        report.line("no entitlement deleted")
      } else {
        for id in response.deletedEntitlementIDs { report.line("deleted \(id)") }
      }
    }

  case "product delete":
    let response = try await client.deleteProducts(
      appID: context.argument(0), productIDs: Array(context.parsed.positionals.dropFirst()))
    return render(context, response) { report in
      if response.deletedProductIDs.isEmpty {
        report.line("no product deleted")
      } else {
        for id in response.deletedProductIDs { report.line("deleted \(id)") }
      }
    }

  case "user delete":
    let response = try await client.deleteUser(appID: context.argument(0), userID: context.argument(1))
    return render(context, response) {
      $0.fields([
        ("user id hash", response.userIDHash),
        ("histories erased", String(response.historiesErased)),
        ("transactions erased", String(response.transactionsErased)),
        ("renewal infos erased", String(response.renewalInfosErased)),
        ("receipts erased", String(response.receiptsErased)),
      ])
    }

  default:
    return nil
  }
}

private func entitlementDefinitionTable(
  _ report: inout Report, _ entitlements: [Substatus_V1_EntitlementDefinition]
) {
  report.table(
    ["ENTITLEMENT", "NAME", "PRODUCTS"],
    entitlements.map {
      [$0.entitlementID, Format.orDash($0.displayName), Format.list($0.productIDs)]
    }, empty: "no entitlements")
}

/// The `status` command's first table: each named entitlement, active or why not; nothing when
/// the catalog defines none.
func namedEntitlementTable(_ report: inout Report, _ entitlements: [Substatus_V1_NamedEntitlement]) {
  guard !entitlements.isEmpty else { return }
  report.gap()
  report.table(
    ["NAMED ENTITLEMENT", "ACTIVE", "STATE", "PRODUCT", "EXPIRES", "WILL RENEW", "OWNERSHIP", "TRANSACTION"],
    entitlements.map {
      [
        $0.entitlementID, Format.yesNo($0.active),
        Format.name($0.state, prefix: "SUBSCRIPTION_STATE_"), Format.orDash($0.productID),
        $0.active && $0.expiresMs == 0 ? "never" : Format.time($0.expiresMs),
        Format.yesNo($0.willRenew),
        $0.ownership == .unspecified ? "-" : Format.name($0.ownership, prefix: "OWNERSHIP_TYPE_"),
        Format.orDash($0.transactionID),
      ]
    }, empty: "no named entitlements")
}
