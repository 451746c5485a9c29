/// The deterministic CheckEligibility data set and rule of `peer-bench/WORKLOAD.md`, identical to
/// the Go and Python peers so that `loadgen -verify` can check our answers.
struct BenchWorkload: Sendable {
  struct Transaction: Sendable {
    var group: Int
    var expiresMs: Int64
    var isTrial: Bool
    var isIntro: Bool
    var revoked: Bool
  }

  static let userCount = 1000
  static let productCount = 20
  static let groupCount = 4
  static let nowMs: Int64 = 1_700_000_000_000
  static let windowMs: Int64 = 365 * 86_400_000

  let users: [String: [Transaction]]
  let productGroups: [String: Int]

  init() {
    var state: UInt64 = 20_240_601
    func next() -> UInt64 {
      state &+= 0x9E37_79B9_7F4A_7C15
      var z = state
      z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
      z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
      return z ^ (z >> 31)
    }
    var groups: [String: Int] = [:]
    for p in 0..<Self.productCount { groups[Self.productID(p)] = p / 5 }
    var users: [String: [Transaction]] = [:]
    for u in 0..<Self.userCount {
      let n = Int(next() % 31)
      var history: [Transaction] = []
      history.reserveCapacity(n)
      for _ in 0..<n {
        let product = Int(next() % UInt64(Self.productCount))
        let offset = Int64(next() % UInt64(2 * Self.windowMs))
        let trial = next() % 4 == 0
        let intro = next() % 4 == 0
        let revoked = next() % 10 == 0
        history.append(
          Transaction(
            group: product / 5, expiresMs: Self.nowMs - Self.windowMs + offset, isTrial: trial, isIntro: intro,
            revoked: revoked))
      }
      users[Self.userID(u)] = history
    }
    self.users = users
    productGroups = groups
  }

  static func productID(_ p: Int) -> String { p < 10 ? "com.bench.product.0\(p)" : "com.bench.product.\(p)" }

  static func userID(_ u: Int) -> String {
    let digits = String(u)
    return "user-" + String(repeating: "0", count: max(0, 4 - digits.count)) + digits
  }

  /// One pass over the user's history folding per-group flags, then one lookup per product.
  func check(userID: String, productIDs: [String]) -> [(productID: String, intro: Bool, promo: Bool)] {
    var results: [(productID: String, intro: Bool, promo: Bool)] = []
    results.reserveCapacity(productIDs.count)
    check(userID: userID, productIDs: productIDs) { results.append(($0, $1, $2)) }
    return results
  }

  /// The same, handing each product's answer (product id, intro eligible, promo eligible) to
  /// `answer` in request order instead of collecting them in an array first.
  func check(userID: String, productIDs: [String], _ answer: (String, Bool, Bool) -> Void) {
    var hadIntro = (false, false, false, false)
    var active = (false, false, false, false)
    var any = (false, false, false, false)
    func set(_ flags: inout (Bool, Bool, Bool, Bool), _ g: Int) {
      switch g {
      case 0: flags.0 = true
      case 1: flags.1 = true
      case 2: flags.2 = true
      default: flags.3 = true
      }
    }
    func get(_ flags: (Bool, Bool, Bool, Bool), _ g: Int) -> Bool {
      switch g {
      case 0: flags.0
      case 1: flags.1
      case 2: flags.2
      default: flags.3
      }
    }
    if let history = users[userID] {
      for t in history {
        set(&any, t.group)
        if t.isTrial || t.isIntro { set(&hadIntro, t.group) }
        if !t.revoked && t.expiresMs > Self.nowMs { set(&active, t.group) }
      }
    }
    for id in productIDs {
      if let g = productGroups[id] {
        answer(id, !get(hadIntro, g) && !get(active, g), get(any, g))
      } else {
        answer(id, false, false)
      }
    }
  }

  /// `txs intro_true promo_true` over all users × products (WORKLOAD.md check values).
  func fingerprint() -> (transactions: Int, introTrue: Int, promoTrue: Int) {
    let products = (0..<Self.productCount).map(Self.productID)
    var intro = 0
    var promo = 0
    for u in 0..<Self.userCount {
      for result in check(userID: Self.userID(u), productIDs: products) {
        if result.intro { intro += 1 }
        if result.promo { promo += 1 }
      }
    }
    return (users.values.reduce(0) { $0 + $1.count }, intro, promo)
  }
}
