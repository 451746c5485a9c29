import SubstatusClientTestKit
import RPCCore
import SubstatusWire

func message<M: ProtobufMessage>(_ type: M.Type = M.self, _ build: (inout M) -> Void) -> M {
  var value = M()
  build(&value)
  return value
}

/// 2026-01-01T00:00:00Z in milliseconds.
let newYear2026: Int64 = 1_767_225_600_000

/// Canned answers of a fake substatus server for the CLI's output tests.
enum Canned {
  static let policy = message(Substatus_V1_EligibilityPolicy.self) {
    $0.lapsedSubscribersGetIntro = true
    $0.promoScope = .group
  }
  static let app1 = message(Substatus_V1_App.self) {
    $0.appID = "app_1"
    $0.bundleID = "com.example.app"
    $0.appleAppID = 1_234_567
    $0.displayName = "Example"
    $0.sharedSecretFingerprint = "sha256:0011223344556677"
    $0.policy = policy
    $0.createdMs = newYear2026
  }
  static let app2 = message(Substatus_V1_App.self) {
    $0.appID = "app_2"
    $0.bundleID = "com.example.other"
    $0.createdMs = newYear2026 + 1_500
  }
  static let tenant = message(Substatus_V1_CreateTenantResponse.self) {
    $0.tenant = message {
      $0.tenantID = "ten_1"
      $0.name = "Example Inc."
      $0.createdMs = newYear2026
    }
    $0.adminKey = "sk_admin_0123456789"
    $0.adminKeyInfo = message {
      $0.keyID = "key_admin"
      $0.role = .admin
    }
  }
  static let disabledTenant = message(Substatus_V1_Tenant.self) {
    $0.tenantID = "ten_2"
    $0.name = "Gone"
    $0.disabled = true
    $0.createdMs = newYear2026
    $0.disabledMs = newYear2026 + 60_000
  }
  static let keyInfo = message(Substatus_V1_ApiKeyInfo.self) {
    $0.keyID = "key_read"
    $0.role = .read
    $0.appIDs = ["app_1"]
    $0.description = "paywall"
    $0.displayPrefix = "sk_rea"
    $0.createdMs = newYear2026
  }
  static let groups: [Substatus_V1_GroupStatus] = [
    message {
      $0.subscriptionGroupID = "20001001"
      $0.state = .active
      $0.productID = "premium.yearly"
      $0.expiresMs = newYear2026
      $0.autoRenewEnabled = true
      $0.autoRenewProductID = "premium.yearly"
      $0.ownership = .purchased
      $0.originalTransactionID = "1000"
    },
    message {
      $0.subscriptionGroupID = "20002002"
      $0.state = .gracePeriod
      $0.productID = "pro.monthly"
      $0.expiresMs = newYear2026 - 86_400_000
      $0.gracePeriodExpiresMs = newYear2026 + 15 * 86_400_000 + 250
      $0.billingIssue = true
      $0.ownership = .familyShared
    },
  ]
  static let entitlements: [Substatus_V1_Entitlement] = [
    message {
      $0.productID = "lifetime"
      $0.type = .nonConsumable
      $0.ownership = .purchased
      $0.transactionID = "4000"
    },
    message {
      $0.productID = "premium.yearly"
      $0.type = .autoRenewable
      $0.expiresMs = newYear2026
      $0.ownership = .purchased
      $0.transactionID = "1004"
      $0.subscriptionGroupID = "20001001"
    },
  ]
  static let status = message(Substatus_V1_GetStatusResponse.self) {
    $0.userID = "u1"
    $0.groups = groups
    $0.entitlements = entitlements
    $0.asOfMs = newYear2026 - 1000
    $0.environment = .sandbox
  }
  static let imported = message(Substatus_V1_ImportReceiptResponseResponse.self) {
    $0.userID = "u1"
    $0.groups = groups
    $0.entitlements = entitlements
    $0.asOfMs = newYear2026
    $0.environment = .production
    $0.transactionCount = 10
    $0.storedTransactionCount = 7
  }
  static let submitted = message(Substatus_V1_SubmitReceiptResponse.self) {
    $0.userID = "u1"
    $0.groups = groups
    $0.entitlements = entitlements
    $0.asOfMs = newYear2026
    $0.environment = .sandbox
    $0.transactionCount = 2
    $0.storedTransactionCount = 2
  }
  static let signedSubmitted = message(Substatus_V1_SubmitSignedTransactionsResponse.self) {
    $0.userID = "u1"
    $0.groups = groups
    $0.entitlements = entitlements
    $0.asOfMs = newYear2026
    $0.environment = .production
    $0.transactionResults = [
      message {
        $0.transactionID = "2000"
        $0.outcome = .created
      },
      message {
        $0.transactionID = "2001"
        $0.outcome = .rejected
        $0.error = message {
          $0.code = 3
          $0.field = "signed_transactions[1]"
          $0.message = "UNTRUSTED_CHAIN: the certificate chain does not end at a trusted root"
        }
      },
    ]
    $0.renewalInfoResults = [
      message {
        $0.originalTransactionID = "2000"
        $0.outcome = .unchanged
      }
    ]
  }
  static let historyPages: [Substatus_V1_GetTransactionHistoryResponse] = [
    message {
      $0.transactions = [
        message {
          $0.transactionID = "1004"
          $0.originalTransactionID = "1000"
          $0.productID = "premium.yearly"
          $0.purchaseDateMs = newYear2026 - 365 * 86_400_000
          $0.expiresDateMs = newYear2026
          $0.ownership = .purchased
        }
      ]
      $0.renewalInfos = [
        message {
          $0.originalTransactionID = "1000"
          $0.productID = "premium.yearly"
          $0.autoRenewProductID = "premium.monthly"
          $0.autoRenewEnabled = true
        }
      ]
      $0.nextPageToken = "page2"
    },
    message {
      $0.transactions = [
        message {
          $0.transactionID = "1000"
          $0.originalTransactionID = "1000"
          $0.productID = "premium.monthly"
          $0.purchaseDateMs = 1_704_067_200_000
          $0.expiresDateMs = 1_704_672_000_000
          $0.isTrialPeriod = true
          $0.offerType = .introductory
          $0.revocationDateMs = 1_704_100_000_000
          $0.revocationType = .refundFull
        }
      ]
    },
  ]
  static let report = message(Substatus_V1_Report.self) {
    $0.appID = "app_1"
    $0.environment = .production
    $0.asOfMs = newYear2026
    $0.users = 12
    $0.active = 5
    $0.inTrial = 2
    $0.inIntro = 1
    $0.inGrace = 1
    $0.inBillingRetry = 1
    $0.expired = 3
    $0.refunded = 1
    $0.familySharedBeneficiaries = 1
    $0.familyAccessRevoked = 0
    $0.subscriptions = 11
  }

  /// The eligibility answer for one product id.
  static func eligibility(_ productID: String) -> Substatus_V1_ProductEligibility {
    message {
      $0.productID = productID
      switch productID {
      case "premium.monthly":
        $0.subscriptionGroupID = "20001001"
        $0.type = .autoRenewable
        $0.introductory = message {
          $0.eligible = false
          $0.reason = .introAlreadyUsed
          $0.evidenceTransactionID = "1000"
        }
        $0.promotional = message {
          $0.eligible = true
          $0.reason = .existingSubscriber
          $0.evidenceTransactionID = "1004"
        }
        $0.winBackOffers = [
          message {
            $0.offerID = "premium.wb.half"
            $0.reason = .winBackNotOffered
            $0.evidenceTransactionID = "1000"
          },
          message {
            $0.offerID = "premium.wb.free"
            $0.eligible = true
            $0.reason = .winBackOffered
            $0.evidenceTransactionID = "1000"
          },
        ]
      case "pro.monthly":
        $0.subscriptionGroupID = "20002002"
        $0.type = .autoRenewable
        $0.introductory = message {
          $0.eligible = true
          $0.reason = .newCustomer
        }
        $0.promotional = message { $0.reason = .neverSubscribed }
      default:
        $0.introductory = message { $0.reason = .unknownProduct }
        $0.promotional = message { $0.reason = .unknownProduct }
      }
    }
  }
}

/// A router answering every method with the canned values; it records every call in `log`.
func fakeAPIRouter(log: CallLog, healthy: Bool = true) -> RPCRouter {
  var router = RPCRouter()
  router.fake(Substatus_V1_TenantService.createTenant, log: log, reply: Canned.tenant)
  router.fake(Substatus_V1_TenantService.listTenants, log: log) { _, _ in
    message { $0.tenants = [Canned.tenant.tenant!, Canned.disabledTenant] }
  }
  router.fake(Substatus_V1_TenantService.disableTenant, log: log) { request, _ in
    var tenant = Canned.disabledTenant
    tenant.tenantID = request.tenantID
    return message { $0.tenant = tenant }
  }
  router.fake(Substatus_V1_AdminService.registerApp, log: log) { request, _ in
    var app = Canned.app1
    app.bundleID = request.bundleID
    app.displayName = request.displayName
    app.appleAppID = request.appleAppID
    return message { $0.app = app }
  }
  router.fake(Substatus_V1_AdminService.getApp, log: log) { request, _ in
    guard request.appID == "app_1" else {
      throw RPCError(code: .notFound, message: "app \"\(request.appID)\" not found")
    }
    return message { $0.app = Canned.app1 }
  }
  router.fake(Substatus_V1_AdminService.listApps, log: log) { request, _ in
    request.pageToken.isEmpty
      ? message {
        $0.apps = [Canned.app1]
        $0.nextPageToken = "apps2"
      } : message { $0.apps = [Canned.app2] }
  }
  router.fake(Substatus_V1_AdminService.setSharedSecret, log: log) { _, _ in
    message {
      $0.fingerprint = "sha256:8899aabbccddeeff"
      $0.previousFingerprint = "sha256:0011223344556677"
      $0.previousValidUntilMs = newYear2026 + 7 * 86_400_000
    }
  }
  router.fake(Substatus_V1_AdminService.putProducts, log: log) { request, _ in
    message { $0.products = request.products }
  }
  router.fake(Substatus_V1_AdminService.listProducts, log: log) { _, _ in
    let catalog = try Substatus_V1_PutProductsResponse(
      jsonString: String(decoding: try fixtureBytes("catalog.json"), as: UTF8.self))
    return message { $0.products = catalog.products }
  }
  router.fake(Substatus_V1_AdminService.setPolicy, log: log) { request, _ in
    var app = Canned.app1
    app.policy = request.policy
    return message { $0.app = app }
  }
  router.fake(Substatus_V1_AdminService.createApiKey, log: log) { request, _ in
    var info = Canned.keyInfo
    info.role = request.role
    info.appIDs = request.appIDs
    info.description = request.description
    return message {
      $0.info = info
      $0.key = "sk_new_secret_key"
    }
  }
  router.fake(Substatus_V1_AdminService.listApiKeys, log: log) { _, _ in
    message {
      $0.apiKeys = [
        Canned.tenant.adminKeyInfo!,
        message {
          $0.keyID = "key_old"
          $0.role = .ingest
          $0.revoked = true
          $0.revokedMs = newYear2026
          $0.lastUsedMs = newYear2026 - 60_000
        },
      ]
    }
  }
  router.fake(Substatus_V1_AdminService.revokeApiKey, log: log) { request, _ in
    message {
      $0.info = message {
        $0.keyID = request.keyID
        $0.role = .read
        $0.revoked = true
        $0.revokedMs = newYear2026
      }
    }
  }
  router.fake(Substatus_V1_IngestService.submitReceipt, log: log, reply: Canned.submitted)
  router.fake(Substatus_V1_IngestService.importReceiptResponse, log: log, reply: Canned.imported)
  router.fake(Substatus_V1_IngestService.submitSignedTransactions, log: log, reply: Canned.signedSubmitted)
  router.fake(Substatus_V1_EligibilityService.checkEligibility, log: log) { request, _ in
    message {
      $0.asOfMs = request.asOfMs == 0 ? newYear2026 : request.asOfMs
      $0.users = request.queries.map { query in
        message {
          $0.userID = query.userID
          $0.products = query.productIDs.map(Canned.eligibility)
        }
      }
    }
  }
  router.fake(Substatus_V1_StatusService.getStatus, log: log, reply: Canned.status)
  router.fake(Substatus_V1_IngestService.syncTransactionHistory, log: log) { request, _ in
    message {
      $0.userID = request.userID
      $0.groups = Canned.groups
      $0.entitlements = Canned.entitlements
      $0.asOfMs = newYear2026
      $0.environment = request.environment == .unspecified ? .production : request.environment
      $0.transactionCount = 3
      $0.storedTransactionCount = 2
      $0.revision = "rev-42"
    }
  }
  router.fake(Substatus_V1_StatusService.getTransactionHistory, log: log) { request, _ in
    request.pageToken == "page2" ? Canned.historyPages[1] : Canned.historyPages[0]
  }
  router.fake(Substatus_V1_ReportService.getReport, log: log) { _, _ in
    message { $0.report = Canned.report }
  }
  router.fake(Grpc_Health_V1_Health.check, log: log) { _, _ in
    message { $0.status = healthy ? .serving : .notServing }
  }
  return router
}
