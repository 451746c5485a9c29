import RPCCore
import SubstatusServiceAPI
import SubstatusWire

/// A subscription the notification path renews.
struct Chain: Sendable {
  var userID: String
  var originalTransactionID: String
  var productID: String
  var groupID: String
  /// The expiry of its latest transaction.
  var expiresMs: Int64
}

/// What the measured paths call: one tenant, one app with a 20-product catalog (as the
/// end-to-end benchmark's, `Benchmarks/E2EData`: 4 subscription groups of weekly, monthly,
/// quarterly and yearly auto-renewables, 2 non-renewing passes, 2 non-consumables), its shared
/// secret, a READ and an INGEST key, 50 users of 10 transactions each in five shapes (active with
/// a trial, lapsed, two chains, one-time purchases, refunded), and one subscription of 10
/// transactions per notification to send. Built through the API, so it follows the store's
/// schema whatever it becomes.
struct Fixture: Sendable {
  var appID: String
  var read: Metadata
  var ingest: Metadata
  /// The catalog's product ids, in catalog order.
  var productIDs: [String]
  /// The 50 users CheckEligibility and GetStatus ask about.
  var users: [String]
  /// One subscription per user whose renewal the notification path sends.
  var chains: [Chain]

  static let day = BudgetWorld.dayMs
  static let now = BudgetWorld.nowMs
  static let bundle = BudgetWorld.bundleID
  static let periods: [(suffix: String, duration: String, ms: Int64)] = [
    ("weekly", "P1W", 7 * day), ("monthly", "P1M", 30 * day), ("quarterly", "P3M", 91 * day),
    ("yearly", "P1Y", 365 * day),
  ]

  static func groupID(_ g: Int) -> String { String(21_000_000 + g) }
  static func productID(_ g: Int, _ period: Int) -> String { "\(bundle).g\(g).\(periods[period].suffix)" }

  /// The 20 products.
  static var catalog: [Substatus_V1_Product] {
    var products: [Substatus_V1_Product] = []
    for g in 0..<4 {
      for (p, period) in periods.enumerated() {
        var product = Substatus_V1_Product()
        product.productID = productID(g, p)
        product.type = .autoRenewable
        product.subscriptionGroupID = groupID(g)
        product.duration = period.duration
        product.hasIntroductoryOffer = period.suffix != "weekly"
        product.promotionalOfferIDs = ["\(bundle).g\(g).promo"]
        if period.suffix == "monthly" { product.winBackOfferIDs = ["\(bundle).g\(g).winback"] }
        products.append(product)
      }
    }
    for (suffix, duration) in [("pass30", "P30D"), ("pass1y", "P1Y")] {
      var product = Substatus_V1_Product()
      product.productID = "\(bundle).\(suffix)"
      product.type = .nonRenewing
      product.duration = duration
      products.append(product)
    }
    for suffix in ["lifetime", "theme"] {
      var product = Substatus_V1_Product()
      product.productID = "\(bundle).\(suffix)"
      product.type = .nonConsumable
      products.append(product)
    }
    return products
  }

  /// A lowercase version-4 UUID, as apps send user ids (longer than a small string: a heap string
  /// wherever it is copied, as in production).
  static func uuid(_ rng: inout SplitMix64) -> String {
    let hi = rng.next(), lo = rng.next()
    func hex(_ v: UInt64, _ digits: Int) -> String {
      let s = String(v, radix: 16)
      return String(repeating: "0", count: max(0, digits - s.count)) + s
    }
    let version = (hi & ~0xF000) | 0x4000
    let variant = (lo & ~(0xC << 60)) | (0x8 << 60)
    return "\(hex(version >> 32, 8))-\(hex((version >> 16) & 0xFFFF, 4))-\(hex(version & 0xFFFF, 4))-"
      + "\(hex(variant >> 48, 4))-\(hex(variant & 0xFFFF_FFFF_FFFF, 12))"
  }

  /// Transaction ids: 19 digits, unique in the run.
  static func transactionID(_ n: Int) -> String { String(4_000_000_000_000_000_000 + n) }

  /// `count` renewals of `product` ending at `lastExpires`, the first a free trial when `trial`.
  static func chain(
    product: String, group: String, periodMs: Int64, count: Int, lastExpires: Int64, trial: Bool,
    refundLast: Bool = false, firstID: Int
  ) -> [Substatus_V1_Transaction] {
    let start = lastExpires - Int64(count) * periodMs
    return (0..<count).map { k in
      let at = start + Int64(k) * periodMs
      var t = Substatus_V1_Transaction()
      t.transactionID = transactionID(firstID + k)
      t.originalTransactionID = transactionID(firstID)
      t.productID = product
      t.subscriptionGroupID = group
      t.purchaseDateMs = at
      t.originalPurchaseDateMs = start
      t.expiresDateMs = at + periodMs
      if trial && k == 0 {
        t.isTrialPeriod = true
        t.offerType = .introductory
        t.offerDiscountType = .freeTrial
      }
      if refundLast && k == count - 1 {
        t.revocationDateMs = at + 3 * day
        t.revocationReason = .other
        t.revocationType = .refundFull
      }
      t.ownership = .purchased
      t.environment = .production
      t.webOrderLineItemID = String(5_000_000_000_000_000_000 + firstID + k)
      t.quantity = 1
      t.type = .autoRenewable
      t.signedDateMs = at
      return t
    }
  }

  static func renewal(of t: Substatus_V1_Transaction, autoRenew: Bool, winBack: [String] = []) -> Substatus_V1_RenewalInfo {
    var r = Substatus_V1_RenewalInfo()
    r.originalTransactionID = t.originalTransactionID
    r.productID = t.productID
    r.autoRenewProductID = t.productID
    r.autoRenewEnabled = autoRenew
    r.environment = .production
    r.signedDateMs = now - day
    r.subscriptionGroupID = t.subscriptionGroupID
    r.eligibleWinBackOfferIDs = winBack
    return r
  }

  /// The 10 transactions and the renewal infos of reader `i`, in one of five shapes.
  static func readerHistory(_ i: Int, firstID: Int) -> ([Substatus_V1_Transaction], [Substatus_V1_RenewalInfo]) {
    let g = i / 5 % 4
    switch i % 5 {
    case 0:  // active monthly, trial first
      let t = chain(
        product: productID(g, 1), group: groupID(g), periodMs: periods[1].ms, count: 10,
        lastExpires: now + Int64(1 + i % 20) * day, trial: true, firstID: firstID)
      return (t, [renewal(of: t[9], autoRenew: true)])
    case 1:  // lapsed monthly, offered the win-back
      let t = chain(
        product: productID(g, 1), group: groupID(g), periodMs: periods[1].ms, count: 10,
        lastExpires: now - Int64(10 + i) * day, trial: false, firstID: firstID)
      return (t, [renewal(of: t[9], autoRenew: false, winBack: ["\(bundle).g\(g).winback"])])
    case 2:  // a lapsed yearly chain in one group, an active weekly one in the next
      let a = chain(
        product: productID(g, 3), group: groupID(g), periodMs: periods[3].ms, count: 5,
        lastExpires: now - 100 * day, trial: true, firstID: firstID)
      let b = chain(
        product: productID((g + 1) % 4, 0), group: groupID((g + 1) % 4), periodMs: periods[0].ms, count: 5,
        lastExpires: now + 3 * day, trial: false, firstID: firstID + 5)
      return (a + b, [renewal(of: a[4], autoRenew: false), renewal(of: b[4], autoRenew: true)])
    case 3:  // a lifetime unlock and 30-day passes
      let first = now - 400 * day
      var lifetime = Substatus_V1_Transaction()
      lifetime.transactionID = transactionID(firstID)
      lifetime.originalTransactionID = lifetime.transactionID
      lifetime.productID = "\(bundle).lifetime"
      lifetime.purchaseDateMs = first
      lifetime.originalPurchaseDateMs = first
      lifetime.ownership = .purchased
      lifetime.environment = .production
      lifetime.quantity = 1
      lifetime.type = .nonConsumable
      lifetime.signedDateMs = first
      let passes = (1..<10).map { k in
        var pass = lifetime
        pass.transactionID = transactionID(firstID + k)
        pass.originalTransactionID = pass.transactionID
        pass.productID = "\(bundle).pass30"
        pass.purchaseDateMs = first + Int64(k) * 40 * day
        pass.originalPurchaseDateMs = pass.purchaseDateMs
        pass.expiresDateMs = pass.purchaseDateMs + 30 * day
        pass.type = .nonRenewing
        pass.signedDateMs = pass.purchaseDateMs
        return pass
      }
      return ([lifetime] + passes, [])
    default:  // quarterly, the last renewal refunded
      let t = chain(
        product: productID(g, 2), group: groupID(g), periodMs: periods[2].ms, count: 10,
        lastExpires: now + 30 * day, trial: true, refundLast: true, firstID: firstID)
      return (t, [renewal(of: t[9], autoRenew: false)])
    }
  }

  /// Sets up the tenant, app, keys and histories through the service's API.
  /// - Parameter chains: How many subscriptions to make for the notification path.
  static func make(in world: BudgetWorld, chains chainCount: Int) async throws -> Fixture {
    guard let operatorKey = try await world.service.bootstrapOperatorKey() else {
      throw BudgetError("the new store already had an operator key")
    }
    var createTenant = Substatus_V1_CreateTenantRequest()
    createTenant.name = "budget"
    let tenant = try await world.call(
      Substatus_V1_TenantService.createTenant, createTenant, BudgetWorld.bearer(operatorKey))
    let admin = BudgetWorld.bearer(tenant.adminKey)
    var register = Substatus_V1_RegisterAppRequest()
    register.bundleID = bundle
    register.displayName = "Budget"
    guard let appID = try await world.call(Substatus_V1_AdminService.registerApp, register, admin).app?.appID else {
      throw BudgetError("RegisterApp returned no app")
    }
    var put = Substatus_V1_PutProductsRequest()
    put.appID = appID
    put.products = catalog
    _ = try await world.call(Substatus_V1_AdminService.putProducts, put, admin)
    var secret = Substatus_V1_SetSharedSecretRequest()
    secret.appID = appID
    secret.sharedSecret = BudgetWorld.sharedSecret
    _ = try await world.call(Substatus_V1_AdminService.setSharedSecret, secret, admin)
    func key(_ role: Substatus_V1_ApiKeyRole) async throws -> Metadata {
      var request = Substatus_V1_CreateApiKeyRequest()
      request.role = role
      request.description = "alloc budget"
      return BudgetWorld.bearer(try await world.call(Substatus_V1_AdminService.createApiKey, request, admin).key)
    }
    let ingest = try await key(.ingest)
    var fixture = Fixture(
      appID: appID, read: try await key(.read), ingest: ingest, productIDs: catalog.map(\.productID), users: [],
      chains: [])

    var rng = SplitMix64(state: 0xA110C)
    var nextID = 0
    func importHistory(_ user: String, _ transactions: [Substatus_V1_Transaction], _ renewals: [Substatus_V1_RenewalInfo])
      async throws
    {
      var request = Substatus_V1_ImportTransactionsRequest()
      request.appID = appID
      request.userID = user
      request.transactions = transactions
      request.renewalInfos = renewals
      let response = try await world.call(Substatus_V1_IngestService.importTransactions, request, ingest)
      guard response.transactionResults.allSatisfy({ $0.outcome == .created }) else {
        throw BudgetError("setup: not every transaction of \(user) was created: \(response.transactionResults)")
      }
    }
    for i in 0..<50 {
      let user = uuid(&rng)
      let (transactions, renewals) = readerHistory(i, firstID: nextID)
      nextID += 32
      try await importHistory(user, transactions, renewals)
      fixture.users.append(user)
    }
    for c in 0..<chainCount {
      let user = uuid(&rng)
      let g = c % 4
      let t = chain(
        product: productID(g, 1), group: groupID(g), periodMs: periods[1].ms, count: 10,
        lastExpires: now + Int64(1 + c % 25) * day, trial: true, firstID: nextID)
      nextID += 32
      try await importHistory(user, t, [renewal(of: t[9], autoRenew: true)])
      fixture.chains.append(
        Chain(
          userID: user, originalTransactionID: t[0].originalTransactionID, productID: t[0].productID,
          groupID: groupID(g), expiresMs: t[9].expiresDateMs))
    }
    return fixture
  }
}
