/// One product of an app's catalog, as the tenant admin defines it (`PutProducts`).
public struct Product: Sendable, Hashable, Codable {
  /// The App Store product identifier.
  public var productId: String
  /// The product's kind.
  public var type: ProductType
  /// The subscription group (auto-renewables; optional for the other kinds). An auto-renewable
  /// without one forms a group of its own, named by its product id.
  public var subscriptionGroupId: String?
  /// The subscription period; required for non-renewing subscriptions, whose terms it defines.
  public var duration: ISO8601Duration?
  /// Whether the product has an introductory offer; without one, intro answers `NO_INTRO_OFFER`.
  public var hasIntroductoryOffer: Bool
  /// The promotional offer identifiers configured for the product.
  public var promotionalOfferIds: [String]
  /// The win-back offer identifiers configured for the product (auto-renewables only), in the
  /// order eligibility answers them (rule 19).
  public var winBackOfferIds: [String]

  /// Creates a product.
  public init(
    productId: String, type: ProductType, subscriptionGroupId: String? = nil,
    duration: ISO8601Duration? = nil, hasIntroductoryOffer: Bool = false,
    promotionalOfferIds: [String] = [], winBackOfferIds: [String] = []
  ) {
    self.productId = productId
    self.type = type
    self.subscriptionGroupId = subscriptionGroupId
    self.duration = duration
    self.hasIntroductoryOffer = hasIntroductoryOffer
    self.promotionalOfferIds = promotionalOfferIds
    self.winBackOfferIds = winBackOfferIds
  }

  private enum CodingKeys: String, CodingKey {
    case productId, type, subscriptionGroupId, duration, hasIntroductoryOffer, promotionalOfferIds
    case winBackOfferIds
  }

  /// Decodes a product; one stored before win-back offers existed has none.
  public init(from decoder: any Decoder) throws {
    let container = try decoder.container(keyedBy: CodingKeys.self)
    self.init(
      productId: try container.decode(String.self, forKey: .productId),
      type: try container.decode(ProductType.self, forKey: .type),
      subscriptionGroupId: try container.decodeIfPresent(String.self, forKey: .subscriptionGroupId),
      duration: try container.decodeIfPresent(ISO8601Duration.self, forKey: .duration),
      hasIntroductoryOffer: try container.decode(Bool.self, forKey: .hasIntroductoryOffer),
      promotionalOfferIds: try container.decode([String].self, forKey: .promotionalOfferIds),
      winBackOfferIds: try container.decodeIfPresent([String].self, forKey: .winBackOfferIds) ?? [])
  }
}

/// An app's product catalog: where a transaction's type and group come from (rule 2).
///
/// Build it once per catalog version and reuse it: it indexes products by identifier and numbers
/// the subscription groups, so evaluation does no string hashing beyond one lookup per product.
/// When two products share an identifier, the later one wins.
public struct Catalog: Sendable, Hashable, Codable {
  /// The products, in the order given.
  public let products: [Product]
  /// The auto-renewable subscription groups, in order of first appearance in ``products``.
  public let subscriptionGroupIds: [String]
  /// productId -> index into `products`.
  let index: [String: Int]
  /// For each product, the index of its group in `subscriptionGroupIds` (auto-renewables), or -1.
  let groupIndexOfProduct: [Int]
  /// productId -> index into `products`, for evaluation's hot path.
  let table: StringTable
  // Per product, in the order of `products`: what eligibility reads, as plain values, so that
  // answering a product copies no `Product` (a struct of strings and arrays) out of `products`.
  /// Each product's identifier.
  let productIds: [String]
  /// Each product's type.
  let types: [ProductType]
  /// Whether each product has an introductory offer.
  let introductoryOffers: [Bool]
  /// Each product's win-back offer identifiers.
  let winBackOfferIds: [[String]]
  /// A stable 64-bit hash of every field of every product, in order (FNV-1a over a canonical
  /// encoding: the same in every process), computed once here. Per-user summaries record it with
  /// the policy's (``SummaryFingerprint``) to tell which catalog they were computed with.
  public let fingerprint: UInt64

  /// An empty catalog: every transaction is then classified from its own fields (rule 2).
  public static let empty = Catalog(products: [])

  /// Creates a catalog from products.
  public init(products: [Product]) {
    self.products = products
    var index: [String: Int] = [:]
    index.reserveCapacity(products.count)
    var groups: [String] = []
    var groupIndex: [String: Int] = [:]
    var groupOfProduct: [Int] = []
    groupOfProduct.reserveCapacity(products.count)
    for (position, product) in products.enumerated() {
      index[product.productId] = position
      if product.type == .autoRenewable {
        let group = product.subscriptionGroupId ?? product.productId
        if let existing = groupIndex[group] {
          groupOfProduct.append(existing)
        } else {
          groupIndex[group] = groups.count
          groupOfProduct.append(groups.count)
          groups.append(group)
        }
      } else {
        groupOfProduct.append(-1)
      }
    }
    self.index = index
    let productIds = products.map(\.productId)
    var table = StringTable(capacity: products.count)
    for (productId, position) in index {
      _ = table.insert(productId, position: position) { productIds[$0] }
    }
    self.productIds = productIds
    self.types = products.map(\.type)
    self.introductoryOffers = products.map(\.hasIntroductoryOffer)
    self.winBackOfferIds = products.map(\.winBackOfferIds)
    self.table = table
    self.subscriptionGroupIds = groups
    self.groupIndexOfProduct = groupOfProduct
    self.fingerprint = Catalog.fingerprint(of: products)
  }

  /// The product with this identifier, if the catalog has it.
  public subscript(productId: String) -> Product? {
    index[productId].map { products[$0] }
  }

  /// The type of the product with this identifier, if the catalog has it (without copying the
  /// product, as ``subscript(productId:)`` does).
  public func productType(of productId: String) -> ProductType? {
    position(of: productId).map { types[$0] }
  }

  /// The position of a product in ``products`` (fast path for evaluation).
  @inline(__always)
  func position(of productId: String) -> Int? {
    let productIds = self.productIds
    return table.find(productId) { productIds[$0] }
  }

  private enum CodingKeys: String, CodingKey { case products }

  /// Encodes the products.
  public func encode(to encoder: any Encoder) throws {
    var container = encoder.container(keyedBy: CodingKeys.self)
    try container.encode(products, forKey: .products)
  }

  /// Decodes the products and rebuilds the index.
  public init(from decoder: any Decoder) throws {
    let container = try decoder.container(keyedBy: CodingKeys.self)
    self.init(products: try container.decode([Product].self, forKey: .products))
  }

  /// Two catalogs are equal when their products are.
  public static func == (lhs: Catalog, rhs: Catalog) -> Bool { lhs.products == rhs.products }

  /// Hashes the products.
  public func hash(into hasher: inout Hasher) { hasher.combine(products) }
}

/// An app's eligibility policy where sources disagree (rule 10). The defaults follow
/// docs/architecture.md rule 10.
public struct EligibilityPolicy: Sendable, Hashable, Codable {
  /// Any refund in the group makes intro ineligible (`REFUNDED_IN_GROUP`). Default `false`.
  public var refundsBlockIntro: Bool
  /// A lapsed subscriber who never used an intro offer in the group is eligible (StoreKit's
  /// reading). `false` gives "never subscribed in the group" (`LAPSED_SUBSCRIBER`). Default `true`.
  public var lapsedSubscribersGetIntro: Bool
  /// A group in billing retry still entitles. Default `false`.
  public var billingRetryEntitled: Bool
  /// Whether promotional eligibility looks at the product's group or the whole app.
  public var promoScope: PromoScope
  /// Who owns an original transaction that several of the app's users submitted. Default
  /// ``PurchaseSharing/share``; a stored policy without it decodes as that.
  public var purchaseSharing: PurchaseSharing
  /// The purchase sharing of the app's sandbox data; `nil` (the default): ``purchaseSharing``.
  /// Testers can share while production transfers.
  public var purchaseSharingSandbox: PurchaseSharing?
  /// Rule 26: a transaction first seen through a V2 notification or the Server API whose
  /// `appAccountToken` is set belongs to the app user whose id is that UUID in lower case. Default
  /// `false`. It changes no evaluation, so ``SummaryFingerprint`` leaves it out.
  public var appAccountTokenIsUserId: Bool
  /// The named entitlement of a paid app turned subscription (rule 24); `nil`: none. It changes
  /// no evaluation (the service grants it from the user's Apple Account), so
  /// ``SummaryFingerprint`` leaves it out.
  public var paidAppEntitlement: PaidAppEntitlement?
  /// A V2 `RESCIND_CONSENT` notification erases the app's users linked to its Apple Account
  /// (rule 25). Default `false`: the `CONSENT_RESCINDED` event only. It changes no evaluation, so
  /// ``SummaryFingerprint`` leaves it out.
  public var eraseOnRescindConsent: Bool = false
  /// How refund requests are answered (rule 27); `nil`: they are not. It changes no evaluation,
  /// so ``SummaryFingerprint`` leaves it out.
  public var consumptionPolicy: ConsumptionPolicy? = nil

  /// The scope of promotional-offer eligibility.
  public enum PromoScope: String, Sendable, Hashable, Codable, CaseIterable {
    /// A subscription in the product's group is required (default).
    case group = "GROUP"
    /// A subscription in any group of the app is enough.
    case app = "APP"
  }

  /// Creates a policy; every switch defaults to docs/architecture.md rule 10.
  public init(
    refundsBlockIntro: Bool = false, lapsedSubscribersGetIntro: Bool = true,
    billingRetryEntitled: Bool = false, promoScope: PromoScope = .group,
    purchaseSharing: PurchaseSharing = .share, paidAppEntitlement: PaidAppEntitlement? = nil,
    purchaseSharingSandbox: PurchaseSharing? = nil, appAccountTokenIsUserId: Bool = false
  ) {
    self.refundsBlockIntro = refundsBlockIntro
    self.lapsedSubscribersGetIntro = lapsedSubscribersGetIntro
    self.billingRetryEntitled = billingRetryEntitled
    self.promoScope = promoScope
    self.purchaseSharing = purchaseSharing
    self.paidAppEntitlement = paidAppEntitlement
    self.purchaseSharingSandbox = purchaseSharingSandbox
    self.appAccountTokenIsUserId = appAccountTokenIsUserId
  }

  /// The purchase sharing applied to data of `environment`: ``purchaseSharingSandbox`` in the
  /// sandbox when set, ``purchaseSharing`` otherwise.
  public func purchaseSharing(in environment: Environment) -> PurchaseSharing {
    environment == .sandbox ? purchaseSharingSandbox ?? purchaseSharing : purchaseSharing
  }

  /// Whether every environment shares (no ownership to track: the stores' `ownership_tracked`
  /// is set for good by a policy for which this is false).
  public var sharesInEveryEnvironment: Bool {
    purchaseSharing == .share && (purchaseSharingSandbox ?? .share) == .share
  }

  private enum CodingKeys: String, CodingKey {
    case refundsBlockIntro, lapsedSubscribersGetIntro, billingRetryEntitled, promoScope
    case purchaseSharing, paidAppEntitlement, eraseOnRescindConsent, purchaseSharingSandbox, appAccountTokenIsUserId, consumptionPolicy
  }

  /// Decodes a stored policy; one stored before purchase sharing existed has ``PurchaseSharing/share``.
  public init(from decoder: any Decoder) throws {
    let c = try decoder.container(keyedBy: CodingKeys.self)
    refundsBlockIntro = try c.decode(Bool.self, forKey: .refundsBlockIntro)
    lapsedSubscribersGetIntro = try c.decode(Bool.self, forKey: .lapsedSubscribersGetIntro)
    billingRetryEntitled = try c.decode(Bool.self, forKey: .billingRetryEntitled)
    promoScope = try c.decode(PromoScope.self, forKey: .promoScope)
    purchaseSharing = try c.decodeIfPresent(PurchaseSharing.self, forKey: .purchaseSharing) ?? .share
    paidAppEntitlement = try c.decodeIfPresent(PaidAppEntitlement.self, forKey: .paidAppEntitlement)
    eraseOnRescindConsent = try c.decodeIfPresent(Bool.self, forKey: .eraseOnRescindConsent) ?? false
    purchaseSharingSandbox = try c.decodeIfPresent(PurchaseSharing.self, forKey: .purchaseSharingSandbox)
    appAccountTokenIsUserId = try c.decodeIfPresent(Bool.self, forKey: .appAccountTokenIsUserId) ?? false
    consumptionPolicy = try c.decodeIfPresent(ConsumptionPolicy.self, forKey: .consumptionPolicy)
  }

  /// The defaults of docs/architecture.md rule 10.
  public static let `default` = EligibilityPolicy()
}
