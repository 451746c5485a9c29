import Foundation
import StoreContractTesting
import SubscriptionDomain
import SubscriptionStorage
import SubscriptionStorageSQLite
import SubscriptionStorageTesting
import SubstatusClock
import Synchronization
import Testing

@testable import SubstatusService

/// A receiver that answers out of order: it holds each POST until `batch` are held, then answers
/// them newest first (204); ``releaseStragglers()`` answers the ones held when no new POST came
/// since the previous call (the tail, fewer than a batch). Records the order of sending and of
/// answering.
final class OutOfOrderPoster: HTTPPoster {
  private struct State {
    var held: [(eventId: String, continuation: CheckedContinuation<HTTPPostResponse, Never>)] = []
    var sent: [String] = []
    var answered: [String] = []
    var sentAtLastCheck = -1
  }
  private let state = Mutex(State())
  let batch: Int

  init(batch: Int) { self.batch = batch }

  /// Event ids in the order their POSTs arrived.
  var sent: [String] { state.withLock { $0.sent } }
  /// Event ids in the order they were answered.
  var answered: [String] { state.withLock { $0.answered } }

  func post(url: URL, headers: [(String, String)], body: [UInt8], timeout: Duration) async throws -> HTTPPostResponse {
    let eventId = headers.first { $0.0 == "Substatus-Event-Id" }?.1 ?? ""
    return await withCheckedContinuation { continuation in
      let release = state.withLock { s -> [CheckedContinuation<HTTPPostResponse, Never>] in
        s.sent.append(eventId)
        s.held.append((eventId, continuation))
        guard s.held.count >= batch else { return [] }
        return answerAll(&s)
      }
      for c in release { c.resume(returning: HTTPPostResponse(status: 204, body: [])) }
    }
  }

  /// Answers what is held if nothing arrived since the last call.
  func releaseStragglers() {
    let release = state.withLock { s -> [CheckedContinuation<HTTPPostResponse, Never>] in
      defer { s.sentAtLastCheck = s.sent.count }
      guard s.sent.count == s.sentAtLastCheck else { return [] }
      return answerAll(&s)
    }
    for c in release { c.resume(returning: HTTPPostResponse(status: 204, body: [])) }
  }

  private func answerAll(_ s: inout State) -> [CheckedContinuation<HTTPPostResponse, Never>] {
    let newestFirst = s.held.reversed()
    s.held = []
    s.answered += newestFirst.map(\.eventId)
    return newestFirst.map(\.continuation)
  }
}

@Suite("Webhook dispatcher: batches of records", .serialized)
struct WebhookDispatcherBatchTests {
  enum Backing: String, CaseIterable, CustomTestStringConvertible {
    case memory, sqlite
    var testDescription: String { rawValue }
  }

  static let secret = "whsec_" + String(repeating: "6b", count: 32)

  /// The store of `backing` (a SQLite file under `directory`), seeded with app a1 and webhook w1.
  static func store(_ backing: Backing, in directory: URL) async throws -> WebhookContract.FullStore {
    let store: WebhookContract.FullStore
    switch backing {
    case .memory: store = InMemoryStore()
    case .sqlite:
      store = try SQLiteStore(
        configuration: .dataDirectory(
          directory.path, keyring: MasterKeyring(current: try MasterKey(bytes: Array(repeating: 9, count: 32)))))
    }
    try await Fixture.seed(store)
    try await store.createWebhook(
      WebhookRecord(webhookId: "w1", appId: "a1", url: "https://hooks.example.com/in", createdMs: 1),
      signingSecret: secret)
    return store
  }

  /// Answers come back in another order than the POSTs went out, so each record batch holds
  /// other users' deliveries than the claim did, and each user's next delivery must wait for its
  /// own head's record, whichever batch it is in: every event goes out once, each user's in log
  /// order, and every delivery is recorded delivered with its one attempt.
  @Test("a receiver that answers out of order: each event once, each user's in log order, all recorded", arguments: Backing.allCases)
  func outOfOrderAnswers(_ backing: Backing) async throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("dispatch-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let store = try await Self.store(backing, in: directory)
    let users = (0..<12).map { "u\($0)" }
    let events = try await WebhookContract.addEvents(store, users: Array(repeating: users, count: 4).flatMap { $0 })
    let userOf = Dictionary(uniqueKeysWithValues: events.map { ($0.event.eventId, $0.event.userId) })
    let poster = OutOfOrderPoster(batch: 5)
    let world = TestWorld(wallMs: 1_700_000_000_000)
    let dispatcher = WebhookDispatcher(
      store: store, environment: world.environment,
      configuration: .init(maxInFlightPerWebhook: 8, maxClaimedPerWebhook: 8), poster: poster)
    let task = Task { await dispatcher.run() }
    defer {
      dispatcher.beginGracefulShutdown()
      task.cancel()
    }
    dispatcher.notifyEventsAppended()
    try await waitUntil("every delivery recorded", timeout: .seconds(30)) {
      poster.releaseStragglers()
      let listed = try await store.deliveries(appId: "a1", webhookId: "w1", failedOnly: false, page: PageRequest(size: 1000))
      return listed.items.count == events.count && listed.items.allSatisfy { $0.state == .delivered }
    }
    let sent = poster.sent
    #expect(sent.count == events.count, "each event POSTed once")
    #expect(Set(sent) == Set(events.map(\.event.eventId)))
    #expect(poster.answered != sent, "the answers came in another order")
    for user in users {
      #expect(
        sent.filter { userOf[$0] == user } == events.filter { $0.event.userId == user }.map(\.event.eventId),
        "\(user)'s events in log order")
    }
    let listed = try await store.deliveries(appId: "a1", webhookId: "w1", failedOnly: false, page: PageRequest(size: 1000))
    #expect(listed.items.allSatisfy { $0.attempts.count == 1 && $0.attempts[0].httpStatus == 204 })
    dispatcher.beginGracefulShutdown()
    task.cancel()
    await task.value
    (store as? SQLiteStore)?.close()
  }
}
