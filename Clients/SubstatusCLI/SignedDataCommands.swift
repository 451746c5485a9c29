import Foundation
import RPCCore
import SubstatusClient
import SubstatusWire

/// The commands of issue #9 (signed data): the In-App Purchase key and offer signatures.
let signedDataCommands: [CommandSpec] = [
  CommandSpec(
    words: ["app", "set-iap-key"], positionals: ["APP"],
    options: [
      OptionSpec(
        name: "--issuer-id", value: "ID", help: "the issuer id from App Store Connect (a UUID)",
        required: true),
      OptionSpec(
        name: "--key-id", value: "ID", help: "the key's id, 10 letters and digits", required: true),
      OptionSpec(
        name: "--key-file", value: "F.p8",
        help: "read the private key (.p8) from F (default: standard input)"),
    ],
    summary: "set the app's In-App Purchase key; prints its key id, issuer and fingerprint",
    details:
      "The private key is read from a file or standard input, never from the command line; it is\nencrypted at rest and never shown again."
  ),
  CommandSpec(
    words: ["offer", "sign-promo"], positionals: ["APP", "USER", "PRODUCT", "OFFER"],
    options: [
      OptionSpec(
        name: "--app-account-token", value: "UUID",
        help: "the app account token the purchase will carry"),
      OptionSpec(name: "--nonce", value: "UUID", help: "the nonce to sign (default: a random one)"),
      OptionSpec(
        name: "--transaction-id", value: "ID",
        help: "a transaction id of the user for the V2 JWS (default: the most recent stored)"),
      OptionSpec(
        name: "--environment", value: "production|sandbox",
        help: "whose purchases decide eligibility (default production)"),
    ],
    summary: "sign a promotional offer for an eligible user (V1 signature and V2 JWS)"),
  CommandSpec(
    words: ["offer", "sign-intro"], positionals: ["APP", "USER", "PRODUCT"],
    options: [
      OptionSpec(
        name: "--transaction-id", value: "ID",
        help: "a transaction id of the user (default: the most recent stored)"),
      OptionSpec(name: "--nonce", value: "UUID", help: "the nonce to sign (default: a random one)"),
      OptionSpec(
        name: "--environment", value: "production|sandbox",
        help: "whose purchases decide eligibility (default production)"),
    ],
    summary: "sign an introductory-offer eligibility JWS for an eligible user"),
]

/// Runs a command of ``signedDataCommands``; `nil` for any other command.
func executeSignedData(_ command: CommandSpec, _ context: CommandContext) async throws -> String? {
  let client = context.client
  switch command.name {
  case "app set-iap-key":
    let bytes = try context.read(
      context.parsed.value("--key-file") ?? "-", what: "the In-App Purchase key")
    guard let pem = String(validating: bytes, as: UTF8.self) else {
      throw UsageError(message: "the In-App Purchase key is not UTF-8 text", command: command.name)
    }
    guard !pem.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else {
      throw UsageError(message: "the In-App Purchase key is empty", command: command.name)
    }
    let app = try await client.setInAppPurchaseKey(
      appID: context.argument(0), issuerID: context.parsed.value("--issuer-id") ?? "",
      keyID: context.parsed.value("--key-id") ?? "", privateKeyPEM: pem)
    var response = Substatus_V1_SetInAppPurchaseKeyResponse()
    response.app = app
    let key = app.inAppPurchaseKey ?? Substatus_V1_InAppPurchaseKeyInfo()
    return renderSignedData(context, response) {
      $0.fields([
        ("key id", key.keyID), ("issuer id", key.issuerID),
        ("fingerprint", key.publicKeyFingerprint), ("set", Format.time(key.setMs)),
      ])
    }

  case "offer sign-promo":
    let response = try await client.signPromotionalOffer(
      appID: context.argument(0), userID: context.argument(1), productID: context.argument(2),
      offerID: context.argument(3),
      appAccountToken: context.parsed.value("--app-account-token") ?? "",
      nonce: context.parsed.value("--nonce") ?? "",
      transactionID: context.parsed.value("--transaction-id") ?? "",
      environment: try context.environmentFlag())
    return renderSignedData(context, response) {
      $0.fields([
        ("product", response.productID), ("offer", response.offerID),
        ("reason", Format.name(response.reason, prefix: "ELIGIBILITY_REASON_")),
        ("key id", response.keyID), ("nonce", response.nonce),
        ("timestamp", String(response.timestampMs)), ("signature", response.signature),
        ("compact jws", response.compactJws),
      ])
    }

  case "offer sign-intro":
    let response = try await client.signIntroductoryOfferEligibility(
      appID: context.argument(0), userID: context.argument(1), productID: context.argument(2),
      transactionID: context.parsed.value("--transaction-id") ?? "",
      nonce: context.parsed.value("--nonce") ?? "", environment: try context.environmentFlag())
    return renderSignedData(context, response) {
      $0.fields([
        ("product", response.productID),
        ("reason", Format.name(response.reason, prefix: "ELIGIBILITY_REASON_")),
        ("key id", response.keyID), ("nonce", response.nonce),
        ("issued at", String(response.issuedAtMs)), ("compact jws", response.compactJws),
      ])
    }

  default:
    return nil
  }
}

/// The In-App Purchase key lines of `app show`.
func inAppPurchaseKeyFields(_ app: Substatus_V1_App) -> [(String, String)] {
  guard let key = app.inAppPurchaseKey else { return [("in-app purchase key", "not set")] }
  return [
    ("in-app purchase key", key.keyID), ("issuer id", key.issuerID),
    ("key fingerprint", key.publicKeyFingerprint), ("key set", Format.time(key.setMs)),
  ]
}

/// The response as pretty proto3 JSON with `--json`, else the human report.
private func renderSignedData<Message: ProtobufJSONMessage>(
  _ context: CommandContext, _ response: Message, _ build: (inout Report) -> Void
) -> String {
  if context.json { return response.jsonValue().serializedPretty() + "\n" }
  var report = Report()
  build(&report)
  return report.text
}
