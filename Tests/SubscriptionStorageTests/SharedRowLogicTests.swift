import SubscriptionDomain
import SubscriptionStorage
import Testing

/// A row of literal cells, as a dialect's row hands them to the shared decoders.
private struct CellRow: StoreRow {
  enum Cell {
    case text(String)
    case int(Int64)
    case bytes([UInt8])
    case null
  }

  var cells: [Cell]

  func text(_ column: Int) -> String {
    if case .text(let s) = cells[column] { return s }
    return ""
  }
  func optionalText(_ column: Int) -> String? {
    if case .text(let s) = cells[column] { return s }
    return nil
  }
  func int(_ column: Int) -> Int64 {
    if case .int(let v) = cells[column] { return v }
    return 0
  }
  func optionalInt(_ column: Int) -> Int64? {
    if case .int(let v) = cells[column] { return v }
    return nil
  }
  func bytes(_ column: Int) -> [UInt8] {
    if case .bytes(let b) = cells[column] { return b }
    return []
  }
}

/// The logic the SQL stores share over their rows and values (SecretSealing.swift,
/// WebhookRows.swift); the store contract suite runs it through every store, these check its
/// edges directly.
@Suite("Shared row logic of the SQL stores")
struct SharedRowLogicTests {
  /// One kind of sealed value: how it is sealed, opened and re-sealed for an owner.
  struct Sealer: Sendable, CustomTestStringConvertible {
    var name: String
    var seal: @Sendable (String, String, MasterKeyring) throws(StoreError) -> SealedSecret
    var open: @Sendable (SealedSecret, String, MasterKeyring) throws(StoreError) -> String
    var reseal: @Sendable (SealedSecret, String, MasterKeyring) throws(StoreError) -> SealedSecret
    var testDescription: String { name }
  }

  static let sealers: [Sealer] = [
    Sealer(
      name: "shared secret",
      seal: { (secret, owner, keyring) throws(StoreError) in
        try SharedSecretSealing.seal(secret, appId: owner, keyring: keyring)
      },
      open: { (sealed, owner, keyring) throws(StoreError) in
        let version = SharedSecretSealing.StoredVersion(sealed: sealed, fingerprint: "f", setMs: 1)
        let row = CellRow(cells: [
          .text(version.sealed.keyId), .bytes(version.sealed.box), .text("f"), .int(1), .null, .null, .null, .null,
          .null,
        ])
        return try SharedSecretSealing.open(SharedSecretSealing.stored(row), appId: owner, keyring: keyring).current
          .secret
      },
      reseal: { (sealed, owner, keyring) throws(StoreError) in
        try SharedSecretSealing.reseal(sealed, appId: owner, keyring: keyring)
      }),
    Sealer(
      name: "In-App Purchase key",
      seal: { (secret, owner, keyring) throws(StoreError) in
        let key = InAppPurchaseKey(
          keyId: "K", issuerId: "I", privateKeyPEM: secret, publicKeyPEM: "P", publicKeyFingerprint: "F", setMs: 1)
        return try InAppPurchaseKeySealing.seal(key, appId: owner, keyring: keyring)
      },
      open: { (sealed, owner, keyring) throws(StoreError) in
        let row = CellRow(cells: [
          .text("K"), .text("I"), .text("F"), .text("P"), .int(1), .text(sealed.keyId), .bytes(sealed.box),
        ])
        return try InAppPurchaseKeySealing.open(InAppPurchaseKeySealing.stored(row), appId: owner, keyring: keyring)
          .privateKeyPEM
      },
      reseal: { (sealed, owner, keyring) throws(StoreError) in
        try InAppPurchaseKeySealing.reseal(sealed, appId: owner, keyring: keyring)
      }),
    Sealer(
      name: "webhook signing secret",
      seal: { (secret, owner, keyring) throws(StoreError) in
        try WebhookFanOut.seal(secret, webhookId: owner, keyring: keyring)
      },
      open: { (sealed, owner, keyring) throws(StoreError) in
        try WebhookFanOut.open(sealed, webhookId: owner, keyring: keyring)
      },
      reseal: { (sealed, owner, keyring) throws(StoreError) in
        try WebhookFanOut.reseal(sealed, webhookId: owner, keyring: keyring)
      }),
  ]

  @Test("a sealed value opens for its owner only, and re-sealing moves it to the current master key", arguments: sealers)
  func sealing(sealer: Sealer) throws {
    let old = MasterKeyring(current: .generate())
    let sealed = try sealer.seal("s3cret", "owner-1", old)
    #expect(sealed.keyId == old.current.id)
    #expect(try sealer.open(sealed, "owner-1", old) == "s3cret")
    // A box copied to another owner's row does not open.
    let copied = #expect(throws: StoreError.self) { try sealer.open(sealed, "owner-2", old) }
    #expect(copied?.code == .secretUnavailable)

    let rotated = MasterKeyring(current: .generate(), previous: [old.current])
    let resealed = try sealer.reseal(sealed, "owner-1", rotated)
    #expect(resealed.keyId == rotated.current.id)
    #expect(try sealer.open(resealed, "owner-1", MasterKeyring(current: rotated.current)) == "s3cret")
    // Without the key it was sealed under, it cannot be re-sealed.
    let lost = #expect(throws: StoreError.self) {
      try sealer.reseal(sealed, "owner-1", MasterKeyring(current: .generate()))
    }
    #expect(lost?.code == .secretUnavailable)
  }

  @Test("a store without a master key names the two ways to set one")
  func missingKeyring() throws {
    let error = #expect(throws: StoreError.self) { try MasterKeyring.required(nil) }
    #expect(error?.code == .secretUnavailable)
    #expect(error?.message.contains(MasterKeyring.environmentVariable) == true)
    #expect(error?.message.contains(MasterKeyring.fileEnvironmentVariable) == true)
    let keyring = MasterKeyring(current: .generate())
    #expect(try MasterKeyring.required(keyring).current.id == keyring.current.id)
  }

  @Test("shared secrets: the previous version only when its key id is set")
  func sharedSecretRows() throws {
    let keyring = MasterKeyring(current: .generate())
    let current = try SharedSecretSealing.seal("new", appId: "a1", keyring: keyring)
    let previous = try SharedSecretSealing.seal("old", appId: "a1", keyring: keyring)
    let both = CellRow(cells: [
      .text(current.keyId), .bytes(current.box), .text("fn"), .int(20), .text(previous.keyId), .bytes(previous.box),
      .text("fo"), .int(10), .int(30),
    ])
    let opened = try SharedSecretSealing.open(SharedSecretSealing.stored(both), appId: "a1", keyring: keyring)
    #expect(opened.current == SharedSecretVersion(secret: "new", fingerprint: "fn", setMs: 20))
    #expect(opened.previous == SharedSecretVersion(secret: "old", fingerprint: "fo", setMs: 10))
    #expect(opened.previousValidUntilMs == 30)
    var one = both
    for i in 4...8 { one.cells[i] = .null }
    let alone = try SharedSecretSealing.open(SharedSecretSealing.stored(one), appId: "a1", keyring: keyring)
    #expect(alone.previous == nil && alone.previousValidUntilMs == nil)
  }

  @Test("webhook and delivery rows")
  func webhookRows() throws {
    let webhook = WebhookRowCoding.webhook(
      CellRow(cells: [
        .text("wh1"), .text("a1"), .text("https://example.com/hook"), .text("RENEWED,SUBSCRIPTION_STARTED"), .int(5),
        .text("fp"), .text("Sandbox"),
      ]))
    #expect(
      webhook
        == WebhookRecord(
          webhookId: "wh1", appId: "a1", url: "https://example.com/hook", eventTypes: [.renewed, .subscriptionStarted],
          environment: .sandbox, createdMs: 5, secretFingerprint: "fp"))

    let event = SubscriptionEvent(
      eventId: "e1", appId: "a1", userId: "u1", environment: .production, type: .renewed, occurredMs: 1, detectedMs: 2)
    let attempt = DeliveryAttemptRecord(attemptedMs: 3, httpStatus: 500, error: nil, durationMs: 4)
    func delivery(state: String) throws -> DeliveryRecord {
      try WebhookRowCoding.delivery(
        CellRow(cells: [
          .int(42), .text("wh1"), .int(7), .bytes(WebhookRowCoding.encode(event)), .text(state), .int(99), .int(6),
          .bytes(WebhookRowCoding.encode([attempt])),
        ]))
    }
    let pending = try delivery(state: "PENDING")
    #expect(pending.deliveryId == "dlv_000000000042")
    #expect(pending.event == LoggedEvent(sequence: 7, event: event))
    #expect(pending.attempts == [attempt])
    #expect(pending.nextAttemptMs == 99 && pending.createdMs == 6)
    // A delivery that ended has no due time, whatever its row holds.
    #expect(try delivery(state: "FAILED").nextAttemptMs == nil)
  }

  @Test("the deliveries listing: cursor bound, pages, unrecorded outcomes")
  func listing() throws {
    #expect(try WebhookRowCoding.listingBound(PageRequest()) == .max)
    #expect(try WebhookRowCoding.listingBound(PageRequest(cursor: "17")) == 17)
    let bad = #expect(throws: StoreError.self) { try WebhookRowCoding.listingBound(PageRequest(cursor: "x")) }
    #expect(bad?.code == .invalidArgument)

    let event = LoggedEvent(
      sequence: 1,
      event: SubscriptionEvent(
        eventId: "e", appId: "a1", userId: "u", environment: .production, type: .renewed, occurredMs: 0, detectedMs: 0))
    let rows = (1...3).reversed().map { key in
      DeliveryRecord(
        deliveryId: WebhookRowCoding.deliveryId(Int64(key)), webhookId: "wh1", event: event, state: .pending,
        nextAttemptMs: 0, createdMs: 0)
    }
    let full = WebhookRowCoding.listingPage(rows, limit: 2)
    #expect(full.items.map(\.deliveryId) == ["dlv_000000000003", "dlv_000000000002"])
    #expect(full.nextCursor == "2")
    #expect(WebhookRowCoding.listingPage(rows, limit: 3).nextCursor == nil)

    let outcomes = ["dlv_000000000001", "dlv_000000000002", "not-a-delivery"].map { id in
      DeliveryOutcome(
        deliveryId: id, attempt: DeliveryAttemptRecord(attemptedMs: 0, httpStatus: 200, error: nil, durationMs: 0),
        state: .delivered, nextAttemptMs: nil)
    }
    #expect(WebhookRowCoding.unrecorded(outcomes, recorded: [1]) == ["dlv_000000000002", "not-a-delivery"])
  }
}
