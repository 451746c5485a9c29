import Foundation
import StoreContractTesting
import SubscriptionDomain
import SubscriptionStorage
import Testing

@testable import SubscriptionStoragePostgres

/// The webhook part of the contract against PostgreSQL, and what only it shows: two instances
/// claiming at once never take the same delivery, nor two of one user; the secret sealed in its row.
@Suite("PostgreSQL store: webhooks")
struct WebhookPostgresTests {
  @Test(arguments: WebhookContract.Case.allCases)
  func contract(_ test: WebhookContract.Case) async throws {
    try await withPostgresStore { store in try await WebhookContract.run(test, store) }
  }

  private func open(_ url: String, keyring: MasterKeyring? = testKeyring) throws -> PostgresStore {
    try PostgresStore(configuration: .init(url: url, keyring: keyring, poolSize: 2))
  }

  @Test("another instance's claims are never released early: on a shared database the lease decides")
  func claimsOfOtherInstancesKeepTheirLease() async throws {
    let url = try await blocking { try PostgresServer.fast.get().createDatabase() }
    let a = try open(url)
    let b = try open(url)
    defer { for s in [a, b] { s.close() } }
    try await Fixture.seed(a)
    try await a.createWebhook(
      WebhookRecord(webhookId: "w1", appId: "a1", url: "https://hooks.example.com/", createdMs: 1),
      signingSecret: "whsec_" + String(repeating: "ab", count: 32))
    _ = try await WebhookContract.addEvents(a, users: ["u1", "u2"])
    _ = try await a.enqueueDeliveries(atMs: 1, limit: 100)
    let claimed = try await a.claimDueDeliveries(
      atMs: 1, limit: 10, leaseUntilMs: 120_001, perWebhookLimit: 10, excludingWebhookIds: [], claimant: "instance-a")
    #expect(claimed.count == 2)
    #expect(try await b.releaseClaims(notMadeBy: "instance-b", atMs: 2) == 0)
    #expect(
      try await b.claimDueDeliveries(
        atMs: 2, limit: 10, leaseUntilMs: 120_002, perWebhookLimit: 10, excludingWebhookIds: [], claimant: "instance-b"
      ).isEmpty)
    let expired = try await b.claimDueDeliveries(
      atMs: 120_001, limit: 10, leaseUntilMs: 240_001, perWebhookLimit: 10, excludingWebhookIds: [], claimant: "instance-b")
    #expect(Set(expired.map(\.deliveryId)) == Set(claimed.map(\.deliveryId)), "taken over when the lease ends")
  }

  @Test func twoInstancesClaimingAtOnceShareTheDeliveriesOncePerUser() async throws {
    let url = try await blocking { try PostgresServer.fast.get().createDatabase() }
    let a = try open(url)
    let b = try open(url)
    defer { for s in [a, b] { s.close() } }
    try await Fixture.seed(a)
    try await a.createWebhook(
      WebhookRecord(webhookId: "w1", appId: "a1", url: "https://hooks.example.com/", createdMs: 1),
      signingSecret: "whsec_" + String(repeating: "ab", count: 32))
    let users = (0..<30).map { "u\($0)" }
    _ = try await WebhookContract.addEvents(a, users: users + users)
    // Both instances fan out at once: each event once.
    async let ea = a.enqueueDeliveries(atMs: 1, limit: 7)
    async let eb = b.enqueueDeliveries(atMs: 1, limit: 7)
    var created = try await ea + eb
    while true {
      let more = try await a.enqueueDeliveries(atMs: 1, limit: 100)
      if more == 0 { break }
      created += more
    }
    let logged = try await a.events(appId: "a1", query: EventQuery(), afterSequence: 0, limit: 1000)
    #expect(created == logged.count)
    async let ca = a.claimDueDeliveries(atMs: 1, limit: 1000, leaseUntilMs: 100)
    async let cb = b.claimDueDeliveries(atMs: 1, limit: 1000, leaseUntilMs: 100)
    let (x, y) = try await (ca, cb)
    let all = x + y
    #expect(Set(all.map(\.deliveryId)).count == all.count, "no delivery claimed twice")
    #expect(Set(all.map(\.event.event.userId)).count == all.count, "one head per user")
    #expect(Set(all.map(\.event.event.userId)) == Set(users))
  }
}
