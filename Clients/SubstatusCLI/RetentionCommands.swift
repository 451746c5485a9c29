import Foundation
import RPCCore
import SubstatusClient
import SubstatusWire

/// The retention commands of issue 35: the app's retention rules (docs/architecture.md
/// "Retention Messaging").
let retentionCommands: [CommandSpec] = [
  CommandSpec(
    words: ["retention", "put"], positionals: ["APP"],
    options: [
      OptionSpec(
        name: "--file", value: "RULES.json", help: "RetentionRules in proto3 JSON; - for stdin", required: true)
    ],
    summary: "replace the app's retention rules (what its retention endpoint answers Apple)",
    details:
      "Example:\n  {\"defaultMessageIdentifier\":\"UUID\",\n   \"rules\":[{\"ruleId\":\"loyal\",\"when\":{\"minPaidPeriods\":3},\n     \"promotionalOffer\":{\"messageIdentifier\":\"UUID\",\"offerId\":\"retain\"}},\n    {\"ruleId\":\"thanks\",\"when\":{},\"message\":{\"messageIdentifier\":\"UUID\"}}]}\nThe first rule whose `when` holds answers; none: the default message."
  ),
  CommandSpec(
    words: ["retention", "list"], positionals: ["APP"], options: [],
    summary: "show the app's retention rules, in order"),
  CommandSpec(
    words: ["retention", "test"], positionals: ["APP", "USER"],
    options: [
      OptionSpec(name: "--product", value: "PRODUCT", help: "the product Apple asks about (default: the user's current subscription)"),
      OptionSpec(name: "--environment", value: "production|sandbox", help: "whose purchases count (default production)"),
    ],
    summary: "what the user would be offered now, which rule decided, and the facts it saw"),
]

/// Runs a command of ``retentionCommands``; `nil` for any other command.
func executeRetention(_ command: CommandSpec, _ context: CommandContext) async throws -> String? {
  let client = context.client
  switch command.name {
  case "retention put":
    let path = context.parsed.value("--file") ?? "-"
    let bytes = try context.read(path, what: "the retention rules")
    let rules: Substatus_V1_RetentionRules
    do throws(WireError) {
      guard let text = String(validating: bytes, as: UTF8.self) else {
        throw WireError(code: .invalidJSON, message: "not UTF-8 text")
      }
      rules = try Substatus_V1_RetentionRules(jsonString: text)
    } catch {
      throw UsageError(
        message: "\(path == "-" ? "standard input" : path) is not RetentionRules in proto3 JSON: \(error.message)",
        command: command.name)
    }
    let response = try await client.putRetentionRules(appID: context.argument(0), rules: rules)
    return render(context, response) { retentionRulesReport(&$0, response.rules ?? Substatus_V1_RetentionRules()) }

  case "retention list":
    let response = try await client.getRetentionRules(appID: context.argument(0))
    return render(context, response) { retentionRulesReport(&$0, response.rules ?? Substatus_V1_RetentionRules()) }

  case "retention test":
    let response = try await client.testRetentionRules(
      appID: context.argument(0), userID: context.argument(1), productID: context.parsed.value("--product") ?? "",
      environment: try context.environmentFlag())
    return render(context, response) { report in
      let answer = response.answer ?? Substatus_V1_RetentionAnswer()
      let facts = response.facts ?? Substatus_V1_RetentionFacts()
      report.fields([
        ("rule", answer.ruleID.isEmpty ? "(default)" : answer.ruleID),
        ("answer", retentionAnswerText(answer)),
        ("product", Format.orDash(facts.productID)),
        ("group", Format.orDash(facts.subscriptionGroupID)),
      ])
      report.gap()
      report.table(
        ["FACT", "VALUE"],
        [
          ["known", String(facts.known)], ["paid periods", String(facts.paidPeriods)],
          ["tenure days", String(facts.tenureDays)], ["intro used", String(facts.introUsed)],
          ["trial used", String(facts.trialUsed)], ["promotional offers used", String(facts.promotionalOffersUsed)],
          ["promotional offer eligible", String(facts.promotionalOfferEligible)],
          ["win-back eligible", String(facts.winBackEligible)], ["billing issue", String(facts.billingIssue)],
          ["refunded", String(facts.refunded)], ["billing plan", Format.orDash(facts.billingPlanType)],
          ["auto-renew", String(facts.autoRenewEnabled)],
        ], empty: "no facts")
    }

  default:
    return nil
  }
}

/// `message UUID`, `alternate product P (message UUID)`, `promotional offer O for P (message UUID)`.
func retentionAnswerText(_ answer: Substatus_V1_RetentionAnswer) -> String {
  if let p = answer.promotionalOffer {
    return "promotional offer \(p.offerID)\(p.productID.isEmpty ? "" : " for \(p.productID)") (message \(p.messageIdentifier))"
  }
  if let a = answer.alternateProduct { return "alternate product \(a.productID) (message \(a.messageIdentifier))" }
  return "message \(answer.message?.messageIdentifier ?? "-")"
}

private func retentionRulesReport(_ report: inout Report, _ rules: Substatus_V1_RetentionRules) {
  report.fields([("default message", rules.defaultMessageIdentifier), ("updated", Format.time(rules.updatedMs))])
  report.gap()
  report.table(
    ["#", "RULE", "WHEN", "ANSWER"],
    rules.rules.enumerated().map { i, rule in
      var answer = Substatus_V1_RetentionAnswer()
      switch rule.answer {
      case .message(let m)?: answer.message = m
      case .alternateProduct(let a)?: answer.alternateProduct = a
      case .promotionalOffer(let p)?: answer.promotionalOffer = p
      case nil: break
      }
      let when = (rule.when ?? Substatus_V1_RetentionCondition()).jsonString()
      return [String(i), rule.ruleID, when == "{}" ? "always" : when, retentionAnswerText(answer)]
    }, empty: "no rules")
}
