// The read side of the per-user summary's codec (docs/evaluation-cache.md "Per-user summaries"):
// a stored summary's header is read once (``UserSummary/Encoded``), then each call decodes only the
// sections it needs: CheckEligibility the group and app facts (``UserSummary/Encoded/eligibility(catalog:policy:fingerprint:at:)``),
// GetStatus and GetEntitlements the whole summary (``UserSummary/Encoded/decoded()``). Sections a
// call does not need are stepped over without making their strings.

extension UserSummaryDecodingError: ByteReaderError {
  /// The error of the shared ``ByteReader``.
  package static func byteReader(_ problem: ByteReaderProblem, at position: Int) -> UserSummaryDecodingError {
    switch problem {
    case .truncated: UserSummaryDecodingError("truncated at byte \(position)")
    case .badVarint: UserSummaryDecodingError("varint too long at byte \(position)")
    case .countBeyondInput(let n): UserSummaryDecodingError("count \(n) beyond the input at byte \(position)")
    case .notUTF8: UserSummaryDecodingError("a string that is not UTF-8 at byte \(position)")
    }
  }
}

extension UserSummary {
  /// Decodes ``encoded()``'s bytes, every section.
  /// - Throws: ``UserSummaryDecodingError`` for another format version, truncated input, a value
  ///   out of range or trailing bytes; never traps, whatever the input.
  public init(decoding bytes: [UInt8]) throws(UserSummaryDecodingError) {
    self = try Encoded(bytes).decoded()
  }

  /// A stored summary's bytes with only its header read (format, fingerprint, window and where
  /// the string table's strings lie): whether it answers at an instant is known without decoding
  /// anything else, and each read decodes only the sections it needs, making only the strings it
  /// reads (each checked to be UTF-8 when it is made).
  ///
  /// ```swift
  /// let stored = try UserSummary.Encoded(bytes)
  /// if let answers = try stored.eligibility(catalog: catalog, policy: policy, fingerprint: fp, at: now) {
  ///   answers.eligibility(for: "com.example.monthly")  // what the evaluation at `now` answers
  /// }
  /// ```
  public struct Encoded: Sendable, Hashable {
    /// The encoded summary (``UserSummary/encoded()``).
    public let bytes: [UInt8]
    /// ``UserSummary/fingerprint``.
    public let fingerprint: UInt64
    /// ``UserSummary/computedAtMs``.
    public let computedAtMs: Int64
    /// ``UserSummary/validUntilMs``.
    public let validUntilMs: Int64?
    /// The string table: per string, the offset of its first byte in `bytes` and of its end.
    let stringBounds: [Int]
    /// Where the groups, the first section of the body, start.
    let bodyStart: Int

    /// Reads the header of ``UserSummary/encoded()``'s bytes.
    /// - Throws: ``UserSummaryDecodingError`` for another format version or a truncated header.
    public init(_ bytes: [UInt8]) throws(UserSummaryDecodingError) {
      var r = ByteReader<UserSummaryDecodingError>(bytes)
      let version = try r.byte()
      guard version == UserSummary.formatVersion else {
        throw UserSummaryDecodingError("format version \(version), expected \(UserSummary.formatVersion)")
      }
      var fingerprint: UInt64 = 0
      for shift in stride(from: 0, to: 64, by: 8) { fingerprint |= UInt64(try r.byte()) << UInt64(shift) }
      let count = try r.count()
      var bounds: [Int] = []
      bounds.reserveCapacity(2 * count)
      for _ in 0..<count {
        let span = try r.stringSpan()
        bounds.append(span.lowerBound)
        bounds.append(span.upperBound)
      }
      self.bytes = bytes
      self.fingerprint = fingerprint
      stringBounds = bounds
      computedAtMs = try r.int()
      switch try r.byte() {
      case 0: validUntilMs = nil
      case 1: validUntilMs = try r.int()
      case let other: throw UserSummaryDecodingError("bad optional marker \(other)")
      }
      bodyStart = r.position
    }

    /// Whether it answers at `time` for the catalog and policy of `fingerprint`: `nil` when it
    /// does, else why not (``UserSummary/usability(fingerprint:at:)``).
    public func usability(fingerprint: SummaryFingerprint, at time: Int64) -> Unusable? {
      UserSummary.usability(
        of: (self.fingerprint, computedAtMs, validUntilMs), fingerprint: fingerprint, at: time)
    }

    /// The whole summary.
    /// - Throws: ``UserSummaryDecodingError`` for a value out of range, a truncated section or
    ///   trailing bytes.
    public func decoded() throws(UserSummaryDecodingError) -> UserSummary {
      var r = sections()
      let groups = try r.groups()
      let facts = try r.facts()
      let entitlements = try r.entitlements()
      let revocations = try r.revocations()
      let appFacts = try r.appFacts()
      let named = try r.named()
      let retention = try r.retention()
      guard r.r.isAtEnd else { throw UserSummaryDecodingError("\(r.r.remaining) trailing bytes") }
      return UserSummary(
        fingerprint: fingerprint, computedAtMs: computedAtMs, validUntilMs: validUntilMs, groups: groups,
        entitlements: entitlements, revocations: revocations, facts: facts, appFacts: appFacts, named: named,
        retention: retention)
    }

    /// The eligibility answers at `time`, identical to those of
    /// ``UserSummary/evaluation(catalog:policy:fingerprint:at:)`` (and so of the history's
    /// evaluation then), from the group and app facts alone: the groups, entitlements and
    /// revocations are stepped over and the named entitlements' facts never read. `nil` when the
    /// summary does not answer then (``usability(fingerprint:at:)``).
    /// - Throws: ``UserSummaryDecodingError`` when a section it reads or steps over is malformed.
    public func eligibility(
      catalog: Catalog, policy: EligibilityPolicy, fingerprint: SummaryFingerprint, at time: Int64
    ) throws(UserSummaryDecodingError) -> EligibilityAnswers? {
      guard usability(fingerprint: fingerprint, at: time) == nil else { return nil }
      var r = sections()
      r.materialize = false
      _ = try r.groups()
      r.materialize = true
      let facts = try r.facts()
      r.materialize = false
      _ = try r.entitlements()
      _ = try r.revocations()
      r.materialize = true
      let appFacts = try r.appFacts()
      return EligibilityAnswers(facts: facts, appFacts: appFacts, catalog: catalog, policy: policy)
    }

    private func sections() -> SummarySectionReader {
      SummarySectionReader(bytes: bytes, at: bodyStart, strings: stringBounds)
    }
  }

  /// ``usability(fingerprint:at:)`` of a summary's header.
  static func usability(
    of header: (fingerprint: UInt64, computedAtMs: Int64, validUntilMs: Int64?), fingerprint: SummaryFingerprint,
    at time: Int64
  ) -> Unusable? {
    if fingerprint.value != header.fingerprint { return .fingerprint }
    if time < header.computedAtMs { return .before }
    if let validUntilMs = header.validUntilMs, time >= validUntilMs { return .expired }
    return nil
  }
}

/// Reads the body's sections in ``UserSummary/encoded()``'s order. One function per section
/// both decodes and steps over it (``materialize`` off: the strings are checked against the table
/// but not made, and nothing is collected), so the layout is written down once for reading.
struct SummarySectionReader {
  typealias Failure = UserSummaryDecodingError
  var r: ByteReader<Failure>
  /// ``UserSummary/Encoded/stringBounds``.
  let strings: [Int]
  /// The strings made so far, by number (a string used twice is made once).
  var made: [String?] = []
  /// Off: sections are stepped over (checked, not collected).
  var materialize = true

  init(bytes: [UInt8], at position: Int, strings: [Int]) {
    r = ByteReader(bytes, at: position)
    self.strings = strings
  }

  mutating func byte() throws(Failure) -> UInt8 { try r.byte() }
  mutating func signed() throws(Failure) -> Int64 { try r.int() }
  mutating func count() throws(Failure) -> Int { try r.count() }

  /// 0 for `nil`, else 1 then the value.
  mutating func optionalSigned() throws(Failure) -> Int64? {
    switch try r.byte() {
    case 0: return nil
    case 1: return try r.int()
    case let other: throw Failure("bad optional marker \(other)")
    }
  }

  /// A string's number in the table.
  mutating func string() throws(Failure) -> String { try table(r.varint()) }

  /// 0 for `nil`, else the string's number plus one.
  mutating func optionalString() throws(Failure) -> String? {
    let n = try r.varint()
    return n == 0 ? nil : try table(n - 1)
  }

  private mutating func table(_ n: UInt64) throws(Failure) -> String {
    let count = strings.count / 2
    guard n < UInt64(count) else { throw Failure("string \(n) not in the table") }
    guard materialize else { return "" }
    let i = Int(n)
    if made.isEmpty { made = Array(repeating: nil, count: count) }
    if let s = made[i] { return s }
    guard let s = String(validating: r.bytes[strings[2 * i]..<strings[2 * i + 1]], as: UTF8.self) else {
      throw Failure("a string that is not UTF-8 at byte \(strings[2 * i])")
    }
    made[i] = s
    return s
  }

  mutating func groups() throws(Failure) -> [GroupStatus] {
    var groups: [GroupStatus] = []
    let n = try count()
    if materialize { groups.reserveCapacity(n) }
    for _ in 0..<n {
      var g = GroupStatus(subscriptionGroupId: try string(), state: try UserSummary.state(byte()))
      g.productId = try optionalString()
      g.transactionId = try optionalString()
      g.originalTransactionId = try optionalString()
      g.expiresDate = try optionalSigned()
      g.gracePeriodExpiresDate = try optionalSigned()
      g.autoRenewProductId = try optionalString()
      let ownership = try byte()
      g.ownership = ownership == 0xFF ? nil : try UserSummary.ownership(ownership)
      let flags = try byte()
      guard flags & ~0x0F == 0 else { throw Failure("bad group flags \(flags)") }
      g.autoRenewEnabled = flags & 1 != 0
      g.billingIssue = flags & 2 != 0
      g.inTrial = flags & 4 != 0
      g.inIntroOffer = flags & 8 != 0
      let plan = try byte()
      guard plan & ~0x13 == 0 else { throw Failure("bad billing plan byte \(plan)") }
      g.billingPlan = try UserSummary.billingPlan(plan & 0x03)
      if plan & 0x10 != 0 {
        let k = try r.varint()
        let n = try r.varint()
        guard k <= UInt64(Int32.max), n <= UInt64(Int32.max) else {
          throw Failure("bad commitment period \(k) of \(n)")
        }
        let expires = try optionalSigned()
        let renewal = try byte()
        guard renewal & ~0x13 == 0 else { throw Failure("bad commitment byte \(renewal)") }
        g.commitment = CommitmentStatus(
          billingPeriodNumber: Int(k), totalBillingPeriods: Int(n), expiresDate: expires,
          willRenew: renewal & 0x10 != 0, renewalBillingPlan: try UserSummary.billingPlan(renewal & 0x03))
      }
      if materialize { groups.append(g) }
    }
    return groups
  }

  mutating func facts() throws(Failure) -> [GroupFacts] {
    var facts: [GroupFacts] = []
    let n = try count()
    if materialize { facts.reserveCapacity(n) }
    for _ in 0..<n {
      var f = GroupFacts(id: try string(), state: try UserSummary.state(byte()))
      f.stateEvidence = try optionalString()
      f.newestTransactionId = try optionalString()
      f.introEvidence = try optionalString()
      f.refundEvidence = try optionalString()
      switch try byte() {
      case 0: break
      case 1:
        let original = try string()
        var ids: [String] = []
        for _ in 0..<(try count()) {
          let id = try string()
          if materialize { ids.append(id) }
        }
        f.winBack = WinBackSource(originalTransactionId: original, eligibleOfferIds: ids)
      case let other: throw Failure("bad win-back marker \(other)")
      }
      if materialize { facts.append(f) }
    }
    return facts
  }

  mutating func entitlements() throws(Failure) -> [Entitlement] {
    var entitlements: [Entitlement] = []
    for _ in 0..<(try count()) {
      let productId = try string()
      let type = try UserSummary.productType(byte())
      let expires = try optionalSigned()
      let ownership = try UserSummary.ownership(byte())
      let transactionId = try string()
      let group = try optionalString()
      if materialize {
        entitlements.append(
          Entitlement(
            productId: productId, type: type, expiresDate: expires, ownership: ownership,
            transactionId: transactionId, subscriptionGroupId: group))
      }
    }
    return entitlements
  }

  mutating func revocations() throws(Failure) -> [Revocation] {
    var revocations: [Revocation] = []
    for _ in 0..<(try count()) {
      let transactionId = try string()
      let original = try string()
      let productId = try string()
      let date = try signed()
      let kind = try UserSummary.revocationKind(byte())
      let ownership = try UserSummary.ownership(byte())
      if materialize {
        revocations.append(
          Revocation(
            transactionId: transactionId, originalTransactionId: original, productId: productId,
            revocationDate: date, kind: kind, ownership: ownership))
      }
    }
    return revocations
  }

  mutating func appFacts() throws(Failure) -> AppFacts {
    var appFacts = AppFacts()
    switch try byte() {
    case 0: appFacts.hasCurrentSubscription = false
    case 1: appFacts.hasCurrentSubscription = true
    case let other: throw Failure("bad app flag \(other)")
    }
    appFacts.currentEvidence = try optionalString()
    appFacts.newestTransactionId = try optionalString()
    return appFacts
  }

  mutating func named() throws(Failure) -> NamedEntitlementFacts {
    var named = NamedEntitlementFacts()
    for _ in 0..<(try count()) {
      let key = try string()
      named.originals[key] = try string()
    }
    for _ in 0..<(try count()) {
      let key = try string()
      named.renewsInto[key] = try string()
    }
    for _ in 0..<(try count()) {
      let productId = try string()
      let transactionId = try string()
      let upgraded: Bool
      switch try byte() {
      case 0: upgraded = false
      case 1: upgraded = true
      case let other: throw Failure("bad upgraded flag \(other)")
      }
      named.newest[productId] = NamedEntitlementFacts.Newest(
        transactionId: transactionId, productId: productId, isUpgraded: upgraded, purchaseDate: try signed(),
        expiresDate: try optionalSigned(), revocationDate: try optionalSigned())
    }
    return named
  }

  mutating func retention() throws(Failure) -> [RetentionGroupHistory] {
    var out: [RetentionGroupHistory] = []
    for _ in 0..<(try count()) {
      var h = RetentionGroupHistory(subscriptionGroupId: try string())
      let paid = try r.varint()
      h.firstPurchaseMs = try optionalSigned()
      switch try byte() {
      case 0: h.trialUsed = false
      case 1: h.trialUsed = true
      case let other: throw Failure("bad trial flag \(other)")
      }
      let promotional = try r.varint()
      guard paid <= UInt64(Int32.max), promotional <= UInt64(Int32.max) else {
        throw Failure("bad retention counts \(paid), \(promotional)")
      }
      h.paidPeriods = Int(paid)
      h.promotionalOffersUsed = Int(promotional)
      if materialize { out.append(h) }
    }
    return out
  }
}
