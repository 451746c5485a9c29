import Foundation
import RPCCore
import SubstatusClient
import SubstatusWire

private let asOfOption = OptionSpec(
  name: "--as-of", value: "MS",
  help: "answer as of this instant, in ms since the epoch (default: now)")
private let environmentOption = OptionSpec(
  name: "--environment", value: "production|sandbox",
  help: "whose purchases count (default production)")

/// Every command of the CLI contract (docs/architecture.md "The CLI contract").
let commandTable: [CommandSpec] = [
  CommandSpec(
    words: ["tenant", "create"], positionals: ["NAME"], options: [],
    summary: "create a tenant; prints its id and its first admin key (operator key)",
    details: "The admin key is shown only once: store it now."),
  CommandSpec(
    words: ["tenant", "list"], positionals: [], options: [],
    summary: "list the tenants (operator key)"),
  CommandSpec(
    words: ["tenant", "disable"], positionals: ["TENANT_ID"], options: [],
    summary: "disable a tenant: its keys stop working, its data is kept (operator key)"),
  CommandSpec(
    words: ["app", "register"], positionals: [],
    options: [
      OptionSpec(
        name: "--bundle-id", value: "ID", help: "the app's bundle identifier", required: true),
      OptionSpec(name: "--name", value: "N", help: "a display name (default: the bundle id)"),
      OptionSpec(name: "--apple-app-id", value: "N", help: "App Store Connect's numeric app id"),
    ],
    summary: "register an app of the tenant; prints its app id"),
  CommandSpec(
    words: ["app", "list"], positionals: [], options: [], summary: "list the tenant's apps"),
  CommandSpec(
    words: ["app", "show"], positionals: ["APP"], options: [],
    summary: "show one app and its policy"),
  CommandSpec(
    words: ["app", "update"], positionals: ["APP"],
    options: [
      OptionSpec(name: "--apple-app-id", value: "N", help: "App Store Connect's numeric app id (0 clears it)"),
      OptionSpec(name: "--name", value: "N", help: "a display name"),
      OptionSpec(
        name: "--small-business", value: "BOOL",
        help: "true: in the App Store Small Business Program (Apple's commission 15 % on every sale, for report chart revenue)"),
    ],
    summary: "change the app's Apple ID, display name or Small Business Program membership"),
  CommandSpec(
    words: ["app", "set-secret"], positionals: ["APP"],
    options: [
      OptionSpec(
        name: "--secret-file", value: "F",
        help: "read the shared secret from F (default: standard input)")
    ],
    summary: "set the app's App Store shared secret; prints its fingerprint",
    details:
      "The secret is read from a file or standard input, never from the command line; surrounding\nwhitespace is dropped."
  ),
  CommandSpec(
    words: ["app", "set-policy"], positionals: ["APP"],
    options: [
      OptionSpec(
        name: "--refunds-block-intro", value: "BOOL",
        help: "a refund in a group blocks its intro offer"),
      OptionSpec(
        name: "--lapsed-subscribers-get-intro", value: "BOOL",
        help: "lapsed subscribers who never used an intro offer get it"),
      OptionSpec(
        name: "--billing-retry-entitled", value: "BOOL", help: "billing retry entitles like grace"),
      OptionSpec(
        name: "--promo-scope", value: "group|app", help: "where promotional eligibility looks"),
      OptionSpec(
        name: "--purchase-sharing", value: "share|transfer|keep-first|transfer-if-no-active",
        help: "who owns a purchase that several users submitted"),
      OptionSpec(
        name: "--erase-on-rescind-consent", value: "BOOL",
        help: "a RESCIND_CONSENT notification erases the users of its Apple Account"),
      OptionSpec(
        name: "--purchase-sharing-sandbox", value: "same|share|transfer|keep-first|transfer-if-no-active",
        help: "the purchase sharing of sandbox data (same: as --purchase-sharing)"),
      OptionSpec(
        name: "--app-account-token-is-user-id", value: "BOOL",
        help: "a purchase first seen from Apple belongs to the user named by its appAccountToken"),
      OptionSpec(
        name: "--paid-app-entitlement", value: "ID",
        help: "the named entitlement of those who got the app before --paid-app-before (empty: none)"),
      OptionSpec(
        name: "--paid-app-before", value: "YYYY-MM-DD|VERSION",
        help: "the AppTransaction's original purchase day or version the entitlement needs to be before"),
      OptionSpec(
        name: "--consumption-policy", value: "FILE.json|-",
        help: "how Apple's refund requests are answered: a ConsumptionPolicy in proto3 JSON (empty: none)"),
    ],
    summary: "change the app's eligibility policy (only the fields given)",
    details:
      "BOOL is true or false. At least one flag is needed; the others keep their values.\n--purchase-sharing: share (every submitter has it, the default), transfer (the latest\nsubmitter has it from then on), keep-first (the first keeps it; later submitters are refused\nit with OWNED_BY_ANOTHER_USER), transfer-if-no-active (transfer, unless an owner still has an\nactive entitlement from it: then as keep-first). It applies to later submissions only.\n--purchase-sharing-sandbox: the same choices for sandbox data (testers can share while production\ntransfers); same (the default) follows --purchase-sharing.\n--consumption-policy: for example {\"customerConsented\":true,\"sampleContentProvided\":false,\n\"deliveryStatus\":\"CONSUMPTION_DELIVERY_STATUS_DELIVERED\",\"refundPreference\":\"REFUND_PREFERENCE_DECLINE\"};\nthe server answers each refund request with it (and the share of the period used) within\nApple's 12 hours, with the app's In-App Purchase key."),
  CommandSpec(
    words: ["product", "put"], positionals: ["APP"],
    options: [
      OptionSpec(
        name: "--file", value: "CATALOG.json",
        help: "{\"products\":[Product in proto3 JSON, ...]}; - for stdin",
        required: true)
    ],
    summary: "insert or replace catalog products",
    details:
      "Example catalog:\n  {\"products\":[{\"productId\":\"pro.monthly\",\"type\":\"PRODUCT_TYPE_AUTO_RENEWABLE\",\n    \"subscriptionGroupId\":\"pro\",\"duration\":\"P1M\",\"hasIntroductoryOffer\":true,\n    \"winBackOfferIds\":[\"pro.comeback\"]}]}"
  ),
  CommandSpec(
    words: ["product", "list"], positionals: ["APP"], options: [], summary: "list the app's catalog"
  ),
  CommandSpec(
    words: ["key", "create"], positionals: [],
    options: [
      OptionSpec(
        name: "--role", value: "admin|ingest|read", help: "what the key may call", required: true),
      OptionSpec(
        name: "--app", value: "APP",
        help: "limit the key to this app (repeatable; default: all apps)",
        repeatable: true),
      OptionSpec(
        name: "--description", value: "TEXT", help: "a note, such as \"billing backend, prod\""),
    ],
    summary: "create an API key; prints its id and the key (shown only once)"),
  CommandSpec(
    words: ["key", "list"], positionals: [],
    options: [OptionSpec(name: "--show-revoked", value: nil, help: "list revoked keys too")],
    summary: "list the tenant's API keys (never the keys themselves)"),
  CommandSpec(
    words: ["key", "revoke"], positionals: ["KEY_ID"], options: [],
    summary: "revoke an API key at once"),
  CommandSpec(
    words: ["receipt", "submit"], positionals: ["APP", "USER"],
    options: [
      OptionSpec(
        name: "--receipt-file", value: "F|-",
        help: "the App Store receipt (binary or base64); - for stdin",
        required: true)
    ],
    summary: "verify a receipt with Apple and store its purchases; prints the user's status"),
  CommandSpec(
    words: ["receipt", "import"], positionals: ["APP", "USER"],
    options: [
      OptionSpec(
        name: "--file", value: "RESPONSE.json|-",
        help: "a verifyReceipt response body; - for stdin",
        required: true)
    ],
    summary: "store a verifyReceipt response body; prints the user's status"),
  CommandSpec(
    words: ["signed", "submit"], positionals: ["APP", "USER"],
    options: [
      OptionSpec(
        name: "--file", value: "F|-",
        help: "{\"signedTransactions\":[JWS...],\"signedRenewalInfos\":[JWS...]}; - for stdin",
        required: true)
    ],
    summary: "verify and store StoreKit 2 signed transactions; prints each item and the status",
    details:
      "The file is the request's proto3 JSON without app and user: compact JWS strings as StoreKit's\nTransaction.jwsRepresentation or the App Store Server API return them."),
  CommandSpec(
    words: ["sync"], positionals: ["APP", "USER"],
    options: [
      OptionSpec(
        name: "--transaction-id", value: "ID",
        help: "any transaction id of the user Apple knows (default: the last synced or newest stored)"),
      OptionSpec(
        name: "--environment", value: "production|sandbox",
        help: "where to ask Apple (default: production, then sandbox)"),
      OptionSpec(name: "--full", value: nil, help: "ignore the stored revision: fetch the whole history"),
    ],
    summary: "bring the user's history up to date from the App Store Server API; prints the status",
    details:
      "Needs the app's In-App Purchase key. Fetches only what changed since the last sync unless --full."),
  CommandSpec(
    words: ["eligibility"], positionals: ["APP", "USER", "PRODUCT..."],
    options: [asOfOption, environmentOption],
    summary: "which products the user may buy with an introductory, promotional or win-back offer, and why"),
  CommandSpec(
    words: ["status"], positionals: ["APP", "USER"], options: [asOfOption, environmentOption],
    summary: "the user's named entitlements, state in every subscription group, and entitlements"),
  CommandSpec(
    words: ["history"], positionals: ["APP", "USER"], options: [environmentOption],
    summary: "the user's stored transactions (oldest purchase first) and renewal infos"),
  CommandSpec(
    words: ["report"], positionals: ["APP"], options: [asOfOption, environmentOption],
    summary: "the app's subscription counts by state"),
  CommandSpec(
    words: ["health"], positionals: [], options: [],
    summary:
      "the server's health (grpc.health.v1.Health/Check); needs no key; exit 1 unless SERVING",
    needsKey: false),
] + signedDataCommands + appAccountCommands + accessModelCommands + eventCommands + trendsCommands + exportCommands
  + chartCommands + retentionCommands

/// Runs a parsed command; returns its standard output.
func execute(_ command: CommandSpec, _ context: CommandContext) async throws -> String {
  let client = context.client
  switch command.name {
  case "tenant create":
    let response = try await client.createTenant(name: context.argument(0))
    context.environment.standardError("substatus: the admin key is shown only once: store it now\n")
    return render(context, response) {
      $0.fields([
        ("tenant id", response.tenant?.tenantID ?? ""),
        ("name", response.tenant?.name ?? ""),
        ("admin key id", response.adminKeyInfo?.keyID ?? "-"),
        ("admin key", response.adminKey),
      ])
    }

  case "tenant list":
    let pages = try await client.tenantPages(pageSize: 1000).collect()
    var all = Substatus_V1_ListTenantsResponse()
    all.tenants = pages.flatMap(\.tenants)
    return render(context, all) { report in
      report.table(
        ["TENANT ID", "NAME", "CREATED", "DISABLED"],
        all.tenants.map {
          [
            $0.tenantID, $0.name, Format.time($0.createdMs),
            $0.disabled ? Format.time($0.disabledMs) : "-",
          ]
        }, empty: "no tenants")
    }

  case "tenant disable":
    let response = try await client.disableTenant(tenantID: context.argument(0))
    let tenant = response.tenant ?? Substatus_V1_Tenant()
    return render(context, response) {
      $0.fields([
        ("tenant id", tenant.tenantID), ("name", tenant.name),
        ("disabled", tenant.disabled ? Format.time(tenant.disabledMs) : "no"),
      ])
    }

  case "app register":
    let appleAppID = try context.integer("--apple-app-id") ?? 0
    var request = Substatus_V1_RegisterAppRequest()
    request.bundleID = context.parsed.value("--bundle-id") ?? ""
    request.displayName = context.parsed.value("--name") ?? ""
    request.appleAppID = appleAppID
    let response = try await client.call(
      Substatus_V1_AdminService.registerApp, request)
    return render(context, response) { appFields(&$0, response.app ?? Substatus_V1_App()) }

  case "app list":
    let pages = try await client.appPages(pageSize: 1000).collect()
    var all = Substatus_V1_ListAppsResponse()
    all.apps = pages.flatMap(\.apps)
    return render(context, all) { report in
      report.table(
        ["APP ID", "BUNDLE ID", "NAME", "APPLE APP ID", "SECRET", "CREATED"],
        all.apps.map {
          [
            $0.appID, $0.bundleID, Format.orDash($0.displayName),
            $0.appleAppID == 0 ? "-" : String($0.appleAppID),
            Format.orDash($0.sharedSecretFingerprint), Format.time($0.createdMs),
          ]
        }, empty: "no apps")
    }

  case "app show":
    var request = Substatus_V1_GetAppRequest()
    request.appID = context.argument(0)
    let response = try await client.call(
      Substatus_V1_AdminService.getApp, request)
    return render(context, response) { appFields(&$0, response.app ?? Substatus_V1_App()) }

  case "app update":
    let appleAppID = try context.integer("--apple-app-id")
    let name = context.parsed.value("--name")
    let smallBusiness = try context.boolean("--small-business")
    guard appleAppID != nil || name != nil || smallBusiness != nil else {
      throw UsageError(message: "give --apple-app-id, --name or --small-business", command: command.name)
    }
    let app = try await client.updateApp(
      appID: context.argument(0), appleAppID: appleAppID, displayName: name, smallBusinessProgram: smallBusiness)
    var response = Substatus_V1_UpdateAppResponse()
    response.app = app
    return render(context, response) { appFields(&$0, app) }

  case "app set-secret":
    let bytes = try context.read(
      context.parsed.value("--secret-file") ?? "-", what: "the shared secret")
    guard let text = String(validating: bytes, as: UTF8.self) else {
      throw UsageError(message: "the shared secret is not UTF-8 text", command: command.name)
    }
    let secret = text.trimmingCharacters(in: .whitespacesAndNewlines)
    guard !secret.isEmpty else {
      throw UsageError(message: "the shared secret is empty", command: command.name)
    }
    let response = try await client.setSharedSecret(
      appID: context.argument(0), sharedSecret: secret)
    var fields = [("fingerprint", response.fingerprint)]
    if !response.previousFingerprint.isEmpty {
      fields.append(("previous fingerprint", response.previousFingerprint))
      fields.append(("previous valid until", Format.time(response.previousValidUntilMs)))
    }
    return render(context, response) { $0.fields(fields) }

  case "app set-policy":
    var policy = Substatus_V1_EligibilityPolicy()
    var mask: [String] = []
    if let value = try context.boolean("--refunds-block-intro") {
      policy.refundsBlockIntro = value
      mask.append("refunds_block_intro")
    }
    if let value = try context.boolean("--lapsed-subscribers-get-intro") {
      policy.lapsedSubscribersGetIntro = value
      mask.append("lapsed_subscribers_get_intro")
    }
    if let value = try context.boolean("--billing-retry-entitled") {
      policy.billingRetryEntitled = value
      mask.append("billing_retry_entitled")
    }
    if let scope = try context.choice("--promo-scope", ["group", "app"]) {
      policy.promoScope = scope == "app" ? .app : .group
      mask.append("promo_scope")
    }
    let sharingModes = ["share", "transfer", "keep-first", "transfer-if-no-active"]
    if let sharing = try context.choice("--purchase-sharing", sharingModes) {
      policy.purchaseSharing = purchaseSharing(sharing)
      mask.append("purchase_sharing")
    }
    if let value = try context.boolean("--erase-on-rescind-consent") {
      policy.eraseOnRescindConsent = value
      mask.append("erase_on_rescind_consent")
    }
    if let sharing = try context.choice("--purchase-sharing-sandbox", ["same"] + sharingModes) {
      policy.purchaseSharingSandbox = sharing == "same" ? .unspecified : purchaseSharing(sharing)
      mask.append("purchase_sharing_sandbox")
    }
    if let value = try context.boolean("--app-account-token-is-user-id") {
      policy.appAccountTokenIsUserID = value
      mask.append("app_account_token_is_user_id")
    }
    let paidEntitlement = context.parsed.value("--paid-app-entitlement")
    let paidBefore = context.parsed.value("--paid-app-before")
    if paidEntitlement != nil || paidBefore != nil {
      guard let paidEntitlement, paidEntitlement.isEmpty == (paidBefore ?? "").isEmpty else {
        throw UsageError(
          message: "--paid-app-entitlement and --paid-app-before go together (an empty --paid-app-entitlement alone clears it)",
          command: command.name)
      }
      policy.paidAppEntitlementID = paidEntitlement
      policy.paidAppBefore = paidBefore ?? ""
      mask += ["paid_app_entitlement_id", "paid_app_before"]
    }
    if let path = context.parsed.value("--consumption-policy") {
      if !path.isEmpty {
        let bytes = try context.read(path, what: "the consumption policy")
        do throws(WireError) {
          guard let text = String(validating: bytes, as: UTF8.self) else {
            throw WireError(code: .invalidJSON, message: "not UTF-8 text")
          }
          policy.consumptionPolicy = try Substatus_V1_ConsumptionPolicy(jsonString: text)
        } catch {
          throw UsageError(
            message: "\(path == "-" ? "standard input" : path) is not a ConsumptionPolicy in proto3 JSON: \(error.message)",
            command: command.name)
        }
      }
      mask.append("consumption_policy")
    }
    guard !mask.isEmpty else {
      throw UsageError(
        message:
          "give at least one of --refunds-block-intro, --lapsed-subscribers-get-intro, --billing-retry-entitled, --promo-scope, --purchase-sharing, --purchase-sharing-sandbox, --erase-on-rescind-consent, --app-account-token-is-user-id, --paid-app-entitlement, --consumption-policy",
        command: command.name)
    }
    var request = Substatus_V1_SetPolicyRequest()
    request.appID = context.argument(0)
    request.policy = policy
    request.updateMask = mask
    let response = try await client.call(
      Substatus_V1_AdminService.setPolicy, request)
    return render(context, response) { appFields(&$0, response.app ?? Substatus_V1_App()) }

  case "product put":
    let path = context.parsed.value("--file") ?? "-"
    let bytes = try context.read(path, what: "the catalog")
    let catalog: Substatus_V1_PutProductsResponse
    do throws(WireError) {
      guard let text = String(validating: bytes, as: UTF8.self) else {
        throw WireError(code: .invalidJSON, message: "not UTF-8 text")
      }
      catalog = try Substatus_V1_PutProductsResponse(jsonString: text)
    } catch {
      throw UsageError(
        message:
          "\(path == "-" ? "standard input" : path) is not a catalog {\"products\":[...]}: \(error.message)",
        command: command.name)
    }
    guard !catalog.products.isEmpty else {
      throw UsageError(message: "the catalog lists no products", command: command.name)
    }
    var request = Substatus_V1_PutProductsRequest()
    request.appID = context.argument(0)
    request.products = catalog.products
    let response = try await client.call(
      Substatus_V1_AdminService.putProducts, request)
    return render(context, response) { productTable(&$0, response.products) }

  case "product list":
    let app = context.argument(0)
    let pages = try await client.productPages(appID: app, pageSize: 1000).collect()
    var all = Substatus_V1_ListProductsResponse()
    all.products = pages.flatMap(\.products)
    return render(context, all) { productTable(&$0, all.products) }

  case "key create":
    let role: Substatus_V1_ApiKeyRole =
      switch try context.choice("--role", ["admin", "ingest", "read"]) {
      case "admin": .admin
      case "ingest": .ingest
      default: .read
      }
    let response = try await client.createApiKey(
      role: role, appIDs: context.parsed.options["--app"] ?? [],
      description: context.parsed.value("--description") ?? "")
    context.environment.standardError("substatus: the key is shown only once: store it now\n")
    let info = response.info ?? Substatus_V1_ApiKeyInfo()
    return render(context, response) {
      $0.fields([
        ("key id", info.keyID), ("role", Format.name(info.role, prefix: "API_KEY_ROLE_")),
        ("apps", info.appIDs.isEmpty ? "all" : info.appIDs.joined(separator: ",")),
        ("key", response.key),
      ])
    }

  case "key list":
    let showRevoked = context.parsed.has("--show-revoked")
    let pages = try await client.apiKeyPages(showRevoked: showRevoked, pageSize: 1000).collect()
    var all = Substatus_V1_ListApiKeysResponse()
    all.apiKeys = pages.flatMap(\.apiKeys)
    return render(context, all) { report in
      report.table(
        ["KEY ID", "ROLE", "APPS", "PREFIX", "DESCRIPTION", "CREATED", "LAST USED", "REVOKED"],
        all.apiKeys.map {
          [
            $0.keyID, Format.name($0.role, prefix: "API_KEY_ROLE_"),
            $0.appIDs.isEmpty ? "all" : $0.appIDs.joined(separator: ","),
            Format.orDash($0.displayPrefix),
            Format.orDash($0.description), Format.time($0.createdMs), Format.time($0.lastUsedMs),
            $0.revoked ? Format.time($0.revokedMs) : "-",
          ]
        }, empty: "no keys")
    }

  case "key revoke":
    var request = Substatus_V1_RevokeApiKeyRequest()
    request.keyID = context.argument(0)
    let response = try await client.call(
      Substatus_V1_AdminService.revokeApiKey, request)
    let info = response.info ?? Substatus_V1_ApiKeyInfo()
    return render(context, response) {
      $0.fields([
        ("key id", info.keyID), ("role", Format.name(info.role, prefix: "API_KEY_ROLE_")),
        ("revoked", info.revoked ? Format.time(info.revokedMs) : "no"),
      ])
    }

  case "receipt submit":
    let bytes = try context.read(context.parsed.value("--receipt-file") ?? "-", what: "the receipt")
    let receipt = receiptBase64(bytes)
    guard !receipt.isEmpty else {
      throw UsageError(message: "the receipt is empty", command: command.name)
    }
    let response = try await client.submitReceipt(
      appID: context.argument(0), userID: context.argument(1), receiptData: receipt)
    return render(context, response) { report in
      report.fields([
        ("user", response.userID), ("environment", Format.environment(response.environment)),
        (
          "transactions",
          "\(response.transactionCount) (\(response.storedTransactionCount) new or changed)"
        ),
        ("as of", Format.time(response.asOfMs)),
      ])
      refusedTable(&report, response.refusedOriginalTransactions)
      statusTables(&report, response.groups, response.entitlements)
    }

  case "receipt import":
    let bytes = try context.read(
      context.parsed.value("--file") ?? "-", what: "the verifyReceipt response")
    let response = try await client.importReceiptResponse(
      appID: context.argument(0), userID: context.argument(1), json: bytes)
    return render(context, response) { report in
      report.fields([
        ("user", response.userID), ("environment", Format.environment(response.environment)),
        (
          "transactions",
          "\(response.transactionCount) (\(response.storedTransactionCount) new or changed)"
        ),
        ("as of", Format.time(response.asOfMs)),
      ])
      refusedTable(&report, response.refusedOriginalTransactions)
      statusTables(&report, response.groups, response.entitlements)
    }

  case "signed submit":
    let path = context.parsed.value("--file") ?? "-"
    let bytes = try context.read(path, what: "the signed data")
    var request: Substatus_V1_SubmitSignedTransactionsRequest
    do throws(WireError) {
      guard let text = String(validating: bytes, as: UTF8.self) else {
        throw WireError(code: .invalidJSON, message: "not UTF-8 text")
      }
      request = try Substatus_V1_SubmitSignedTransactionsRequest(jsonString: text)
    } catch {
      throw UsageError(
        message:
          "\(path == "-" ? "standard input" : path) is not {\"signedTransactions\":[...],\"signedRenewalInfos\":[...]}: \(error.message)",
        command: command.name)
    }
    guard !request.signedTransactions.isEmpty || !request.signedRenewalInfos.isEmpty else {
      throw UsageError(message: "the file holds no signed data", command: command.name)
    }
    let response = try await client.submitSignedTransactions(
      appID: context.argument(0), userID: context.argument(1),
      signedTransactions: request.signedTransactions, signedRenewalInfos: request.signedRenewalInfos)
    return render(context, response) { report in
      let outcomes = response.transactionResults.map(\.outcome) + response.renewalInfoResults.map(\.outcome)
      report.fields([
        ("user", response.userID), ("environment", Format.environment(response.environment)),
        (
          "signed items",
          "\(outcomes.count) (\(outcomes.filter { $0 == .created || $0 == .updated }.count) new or changed, \(outcomes.filter { $0 == .rejected }.count) rejected)"
        ),
        ("as of", Format.time(response.asOfMs)),
      ])
      let rejected =
        response.transactionResults.compactMap { r in r.error.map { [$0.field, Format.orDash(r.transactionID), $0.message] } }
        + response.renewalInfoResults.compactMap { r in r.error.map { [$0.field, Format.orDash(r.originalTransactionID), $0.message] } }
      if !rejected.isEmpty {
        report.gap()
        report.table(["REJECTED", "ID", "WHY"], rejected, empty: "")
      }
      statusTables(&report, response.groups, response.entitlements)
    }

  case "sync":
    let response = try await client.syncTransactionHistory(
      appID: context.argument(0), userID: context.argument(1),
      transactionID: context.parsed.value("--transaction-id") ?? "",
      environment: try context.environmentFlag(), fullResync: context.parsed.has("--full"))
    return render(context, response) { report in
      report.fields([
        ("user", response.userID), ("environment", Format.environment(response.environment)),
        ("transactions", "\(response.transactionCount) from Apple (\(response.storedTransactionCount) new or changed)"),
        ("revision", Format.orDash(response.revision)),
        ("as of", Format.time(response.asOfMs)),
      ])
      refusedTable(&report, response.refusedOriginalTransactions)
      statusTables(&report, response.groups, response.entitlements)
    }

  case "eligibility":
    var query = Substatus_V1_EligibilityQuery()
    query.userID = context.argument(1)
    query.productIDs = Array(context.parsed.positionals.dropFirst(2))
    let response = try await client.checkEligibility(
      appID: context.argument(0), queries: [query], asOf: try context.asOf(),
      environment: try context.environmentFlag())
    guard let user = response.users.first else {
      throw CommandFailure(message: "INTERNAL: the server answered no query")
    }
    if let error = user.error {
      let code = RPCError.Code(rawValue: Int(error.code)) ?? .unknown
      let field = error.field.isEmpty ? "" : "\(error.field): "
      throw CommandFailure(message: "\(code): \(field)\(error.message)")
    }
    return render(context, response) { report in
      report.fields([("user", user.userID), ("as of", Format.time(response.asOfMs))])
      report.gap()
      report.table(
        [
          "PRODUCT", "TYPE", "GROUP", "INTRO", "INTRO REASON", "PROMO", "PROMO REASON", "WIN-BACK",
          "EVIDENCE",
        ],
        user.products.map { product in
          let intro = product.introductory ?? Substatus_V1_OfferEligibility()
          let promo = product.promotional ?? Substatus_V1_OfferEligibility()
          let evidence = ([intro.evidenceTransactionID, promo.evidenceTransactionID]
            + product.winBackOffers.map(\.evidenceTransactionID)).filter { !$0.isEmpty }
          return [
            product.productID,
            product.type == .unspecified ? "-" : Format.name(product.type, prefix: "PRODUCT_TYPE_"),
            Format.orDash(product.subscriptionGroupID),
            Format.yesNo(intro.eligible), Format.name(intro.reason, prefix: "ELIGIBILITY_REASON_"),
            Format.yesNo(promo.eligible), Format.name(promo.reason, prefix: "ELIGIBILITY_REASON_"),
            Format.winBackOffers(product.winBackOffers),
            evidence.isEmpty ? "-" : Array(Set(evidence)).sorted().joined(separator: ","),
          ]
        }, empty: "no products")
    }

  case "status":
    let response = try await client.status(
      appID: context.argument(0), userID: context.argument(1), asOf: try context.asOf(),
      environment: try context.environmentFlag())
    return render(context, response) { report in
      report.fields([
        ("user", response.userID), ("environment", Format.environment(response.environment)),
        ("as of", Format.time(response.asOfMs)),
      ])
      namedEntitlementTable(&report, response.namedEntitlements)
      statusTables(&report, response.groups, response.entitlements)
    }

  case "history":
    let app = context.argument(0)
    let user = context.argument(1)
    let environment = try context.environmentFlag()
    let pages = try await client.transactionHistoryPages(
      appID: app, userID: user, environment: environment, pageSize: 1000
    ).collect()
    var all = Substatus_V1_GetTransactionHistoryResponse()
    all.transactions = pages.flatMap(\.transactions)
    all.renewalInfos = pages.flatMap(\.renewalInfos)
    return render(context, all) { report in
      report.table(
        [
          "TRANSACTION", "ORIGINAL", "PRODUCT", "PURCHASED", "EXPIRES", "REVOKED", "OFFER",
          "OWNERSHIP", "FLAGS",
        ],
        all.transactions.map { transaction in
          var flags: [String] = []
          if transaction.isTrialPeriod { flags.append("trial") }
          if transaction.isInIntroOfferPeriod { flags.append("intro") }
          if transaction.isUpgraded { flags.append("upgraded") }
          if transaction.revocationType != .unspecified {
            flags.append(
              Format.name(transaction.revocationType, prefix: "REVOCATION_TYPE_").lowercased())
          }
          return [
            transaction.transactionID, Format.orDash(transaction.originalTransactionID),
            transaction.productID,
            Format.time(transaction.purchaseDateMs), Format.time(transaction.expiresDateMs),
            Format.time(transaction.revocationDateMs),
            transaction.offerType == .unspecified
              ? "-" : Format.name(transaction.offerType, prefix: "OFFER_TYPE_"),
            transaction.ownership == .unspecified
              ? "-" : Format.name(transaction.ownership, prefix: "OWNERSHIP_TYPE_"),
            flags.isEmpty ? "-" : flags.joined(separator: ","),
          ]
        }, empty: "no transactions")
      if !all.renewalInfos.isEmpty {
        report.gap()
        report.table(
          ["ORIGINAL", "PRODUCT", "AUTO-RENEW", "RENEWS INTO", "BILLING RETRY", "GRACE EXPIRES"],
          all.renewalInfos.map {
            [
              $0.originalTransactionID, Format.orDash($0.productID),
              Format.yesNo($0.autoRenewEnabled),
              Format.orDash($0.autoRenewProductID), Format.yesNo($0.isInBillingRetryPeriod),
              Format.time($0.gracePeriodExpiresDateMs),
            ]
          }, empty: "")
      }
    }

  case "report":
    let counts = try await client.report(
      appID: context.argument(0), asOf: try context.asOf(),
      environment: try context.environmentFlag())
    var response = Substatus_V1_GetReportResponse()
    response.report = counts
    return render(context, response) {
      $0.fields([
        ("app", counts.appID), ("environment", Format.environment(counts.environment)),
        ("as of", Format.time(counts.asOfMs)),
        ("users", String(counts.users)), ("subscriptions", String(counts.subscriptions)),
        ("active", String(counts.active)), ("in trial", String(counts.inTrial)),
        ("in intro offer", String(counts.inIntro)), ("in grace period", String(counts.inGrace)),
        ("in billing retry", String(counts.inBillingRetry)), ("expired", String(counts.expired)),
        ("refunded", String(counts.refunded)),
        ("family-shared beneficiaries", String(counts.familySharedBeneficiaries)),
        ("family access revoked", String(counts.familyAccessRevoked)),
        ("assigned beneficiaries", String(counts.assignedBeneficiaries)),
      ])
    }

  case "health":
    let response = try await client.health()
    let output = render(context, response) { $0.line(Format.name(response.status, prefix: "")) }
    guard response.status == .serving else {
      context.environment.standardOutput(output)
      throw CommandFailure(message: "the server is \(Format.name(response.status, prefix: ""))")
    }
    return output

  default:
    if let output = try await executeSignedData(command, context) { return output }
    if let output = try await executeAppAccount(command, context) { return output }
    if let output = try await executeAccessModel(command, context) { return output }
    if let output = try await executeEvents(command, context) { return output }
    if let output = try await executeTrends(command, context) { return output }
    if let output = try await executeExport(command, context) { return output }
    if let output = try await executeChart(command, context) { return output }
    if let output = try await executeRetention(command, context) { return output }
    throw UsageError(message: "unknown command", command: command.name)
  }
}

/// The response as pretty proto3 JSON with `--json`, else the human report.
func render<Message: ProtobufJSONMessage>(
  _ context: CommandContext, _ response: Message, _ build: (inout Report) -> Void
) -> String {
  if context.json { return response.jsonValue().serializedPretty() + "\n" }
  var report = Report()
  build(&report)
  return report.text
}

private func appFields(_ report: inout Report, _ app: Substatus_V1_App) {
  var fields: [(String, String)] = [
    ("app id", app.appID), ("bundle id", app.bundleID),
    ("apple app id", app.appleAppID == 0 ? "-" : String(app.appleAppID)),
    ("name", Format.orDash(app.displayName)),
    (
      "shared secret", app.sharedSecretFingerprint.isEmpty ? "not set" : app.sharedSecretFingerprint
    ),
  ]
  if !app.previousSharedSecretFingerprint.isEmpty {
    fields.append(
      (
        "previous secret",
        "\(app.previousSharedSecretFingerprint) until \(Format.time(app.previousSharedSecretValidUntilMs))"
      ))
  }
  fields += inAppPurchaseKeyFields(app)
  fields.append(("created", Format.time(app.createdMs)))
  if app.smallBusinessProgram { fields.append(("commission", "15 % (App Store Small Business Program)")) }
  if let policy = app.policy {
    fields += [
      ("refunds block intro", String(policy.refundsBlockIntro)),
      ("lapsed subscribers get intro", String(policy.lapsedSubscribersGetIntro)),
      ("billing retry entitled", String(policy.billingRetryEntitled)),
      (
        "promo scope",
        policy.promoScope == .unspecified
          ? "GROUP" : Format.name(policy.promoScope, prefix: "PROMO_SCOPE_")
      ),
      (
        "purchase sharing",
        policy.purchaseSharing == .unspecified
          ? "SHARE" : Format.name(policy.purchaseSharing, prefix: "PURCHASE_SHARING_")
      ),
    ]
    fields.append(("app account token is user id", String(policy.appAccountTokenIsUserID)))
    if policy.purchaseSharingSandbox != .unspecified {
      fields.append(("purchase sharing (sandbox)", Format.name(policy.purchaseSharingSandbox, prefix: "PURCHASE_SHARING_")))
    }
    if !policy.paidAppEntitlementID.isEmpty {
      fields.append(("paid app entitlement", "\(policy.paidAppEntitlementID) before \(policy.paidAppBefore)"))
    }
    if policy.eraseOnRescindConsent { fields.append(("erase on rescind consent", "true")) }
    if let consumption = policy.consumptionPolicy {
      var answer = [
        "consent " + String(consumption.customerConsented),
        Format.name(consumption.deliveryStatus, prefix: "CONSUMPTION_DELIVERY_STATUS_"),
        "sample " + String(consumption.sampleContentProvided),
      ]
      if consumption.refundPreference != .unspecified {
        answer.append(Format.name(consumption.refundPreference, prefix: "REFUND_PREFERENCE_"))
      }
      fields.append(("consumption policy", answer.joined(separator: ", ")))
    }
  }
  report.fields(fields)
}

/// The wire value of a `--purchase-sharing` choice.
func purchaseSharing(_ choice: String) -> Substatus_V1_PurchaseSharing {
  switch choice {
  case "transfer": .transfer
  case "keep-first": .keepFirst
  case "transfer-if-no-active": .transferIfNoActive
  default: .share
  }
}

/// The original transactions a submission was refused (purchase sharing), if any.
func refusedTable(_ report: inout Report, _ refused: [Substatus_V1_RefusedOriginalTransaction]) {
  guard !refused.isEmpty else { return }
  report.gap()
  report.table(
    ["REFUSED", "REASON", "WHY"],
    refused.map { [$0.originalTransactionID, Format.orDash($0.error?.reason ?? ""), $0.error?.message ?? ""] }, empty: "")
}

private func productTable(_ report: inout Report, _ products: [Substatus_V1_Product]) {
  report.table(
    ["PRODUCT", "TYPE", "GROUP", "DURATION", "INTRO OFFER", "PROMOTIONAL OFFERS", "WIN-BACK OFFERS"],
    products.map {
      [
        $0.productID, Format.name($0.type, prefix: "PRODUCT_TYPE_"),
        Format.orDash($0.subscriptionGroupID),
        Format.orDash($0.duration), Format.yesNo($0.hasIntroductoryOffer),
        Format.list($0.promotionalOfferIDs), Format.list($0.winBackOfferIDs),
      ]
    }, empty: "no products")
}

func statusTables(
  _ report: inout Report, _ groups: [Substatus_V1_GroupStatus],
  _ entitlements: [Substatus_V1_Entitlement]
) {
  report.gap()
  report.table(
    ["GROUP", "STATE", "PRODUCT", "EXPIRES", "GRACE EXPIRES", "AUTO-RENEW", "OWNERSHIP", "NOTES"],
    groups.map { group in
      var notes: [String] = []
      if group.billingIssue { notes.append("billing issue") }
      if group.inTrial { notes.append("trial") }
      if group.inIntroOffer { notes.append("intro offer") }
      if group.billingPlan == .monthly { notes.append("billed monthly") }
      if let c = group.commitment {
        // Rule 22: the 12-month commitment, e.g. "commitment 3/12 until 2027-03-01 00:00Z, renews".
        var text = "commitment \(c.billingPeriodNumber)/\(c.totalBillingPeriods)"
        if c.expiresMs != 0 { text += " until \(Format.time(c.expiresMs))" }
        text += c.willRenew ? ", renews" : ", ends"
        if c.willRenew && c.renewalBillingPlan == .billedUpfront { text += " billed up front" }
        notes.append(text)
      }
      if !group.autoRenewProductID.isEmpty && group.autoRenewProductID != group.productID {
        notes.append("renews into \(group.autoRenewProductID)")
      }
      return [
        group.subscriptionGroupID, Format.name(group.state, prefix: "SUBSCRIPTION_STATE_"),
        Format.orDash(group.productID), Format.time(group.expiresMs),
        Format.time(group.gracePeriodExpiresMs),
        group.state == .neverSubscribed ? "-" : Format.yesNo(group.autoRenewEnabled),
        group.ownership == .unspecified
          ? "-" : Format.name(group.ownership, prefix: "OWNERSHIP_TYPE_"),
        notes.isEmpty ? "-" : notes.joined(separator: ", "),
      ]
    }, empty: "no subscription groups")
  report.gap()
  report.table(
    ["ENTITLEMENT", "TYPE", "GROUP", "EXPIRES", "OWNERSHIP", "TRANSACTION"],
    entitlements.map {
      [
        $0.productID, Format.name($0.type, prefix: "PRODUCT_TYPE_"),
        Format.orDash($0.subscriptionGroupID),
        $0.expiresMs == 0 ? "never" : Format.time($0.expiresMs),
        $0.ownership == .unspecified ? "-" : Format.name($0.ownership, prefix: "OWNERSHIP_TYPE_"),
        Format.orDash($0.transactionID),
      ]
    }, empty: "no entitlements")
}

/// The receipt as base64: a file that already holds base64 text is sent as it is (whitespace
/// removed), anything else (the binary PKCS #7 receipt) is encoded.
func receiptBase64(_ bytes: [UInt8]) -> String {
  let allowed = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=-_".utf8)
  let whitespace = Set(" \t\r\n".utf8)
  let compact = bytes.filter { !whitespace.contains($0) }
  if !compact.isEmpty, compact.allSatisfy({ allowed.contains($0) }),
    let text = String(validating: compact, as: UTF8.self), Data(base64Encoded: text) != nil
  {
    return text
  }
  return bytes.isEmpty ? "" : Data(bytes).base64EncodedString()
}
