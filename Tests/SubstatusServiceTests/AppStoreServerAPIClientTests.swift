import Foundation
import HTTPServer
import SubscriptionDomain
import SubstatusJSON
import Synchronization
import Testing

@testable import SubstatusService

/// A fixed bearer token: the fake server checks the client sends it on every request.
struct FixedTokenAuthorizer: AppStoreServerAPIAuthorizer {
  var token = "test-token"
  func bearerToken(nowMs: Int64) throws(AppStoreServerAPIError) -> String { token }
}

/// A small local HTTP server answering from a script of responses; records every request.
final class FakeAppleServer: Sendable {
  struct Seen: Sendable {
    var method: String
    var path: String
    var query: [String: String]
    var authorization: String?
    var body: [UInt8]
  }

  final class Recorder: Sendable { let list = Mutex<[Seen]>([]) }

  private let recorder = Recorder()
  let server: HTTPServer
  var base: URL { URL(string: "http://\(server.address)")! }

  init(_ respond: @escaping @Sendable (HTTPRequest, Int) -> HTTPResponse) throws {
    let recorder = self.recorder
    server = try HTTPServer(configuration: .init(host: "127.0.0.1", port: 0)) { request in
      let n = recorder.list.withLock { list -> Int in
        list.append(
          Seen(
            method: request.method, path: request.path,
            query: Dictionary(request.queryItems.map { ($0.name, $0.value) }, uniquingKeysWith: { $1 }),
            authorization: request.headers["Authorization"], body: request.body))
        return list.count
      }
      return respond(request, n)
    }
  }

  /// Every request so far.
  var seen: [Seen] { recorder.list.withLock { $0 } }

  func client(maxAttempts: Int = 3) -> AppStoreServerAPIClient {
    AppStoreServerAPIClient(
      productionURL: base, sandboxURL: base.appendingPathComponent("sandbox"), timeout: .seconds(5),
      maxAttempts: maxAttempts, initialBackoff: .milliseconds(5))
  }

  func stop() async { await server.stop(gracePeriod: .seconds(1)) }
}

func json(_ value: JSONValue, status: Int = 200) -> HTTPResponse {
  HTTPResponse(status: status, headers: ["Content-Type": "application/json"], body: value.serializedBytes())
}

func appleError(_ status: Int, _ code: Int64) -> HTTPResponse {
  json(.object(["errorCode": .integer(code), "errorMessage": .string("error \(code)")]), status: status)
}

@Suite("App Store Server API client")
struct AppStoreServerAPIClientTests {
  @Test("transaction history: every page in ASCENDING order from the revision, with the bearer token")
  func historyPages() async throws {
    let fake = try FakeAppleServer { request, _ in
      // Three pages: revision "" -> r1 -> r2 -> r3 (no more).
      let revision = request.query("revision") ?? ""
      let next = ["": "r1", "r1": "r2+/=", "r2+/=": "r3"][revision] ?? "r3"
      return json(
        .object([
          "revision": .string(next), "hasMore": .bool(next != "r3"), "environment": .string("Sandbox"),
          "signedTransactions": .array([.string("jws-after-\(revision)")]),
        ]))
    }
    let history = try await fake.client().transactionHistory(
      transactionId: "2000000001", revision: nil, environment: .sandbox, authorizer: FixedTokenAuthorizer(), nowMs: 0)
    await fake.stop()
    #expect(history.revision == "r3")
    #expect(history.pages == 3)
    #expect(history.signedTransactions == ["jws-after-", "jws-after-r1", "jws-after-r2+/="])
    let seen = fake.seen
    #expect(seen.map(\.path) == Array(repeating: "/sandbox/inApps/v2/history/2000000001", count: 3))
    #expect(seen.allSatisfy { $0.authorization == "Bearer test-token" && $0.query["sort"] == "ASCENDING" })
    // A revision with `+`, `/` and `=` reaches the server intact.
    #expect(seen.map { $0.query["revision"] } == [nil, "r1", "r2+/="])
  }

  @Test("transaction history from a stored revision starts there; production uses the production base URL")
  func historyFromRevision() async throws {
    let fake = try FakeAppleServer { request, _ in
      json(.object(["revision": .string("r9"), "hasMore": .bool(false), "signedTransactions": .array([])]))
    }
    let history = try await fake.client().transactionHistory(
      transactionId: "1", revision: "r8", environment: .production, authorizer: FixedTokenAuthorizer(), nowMs: 0)
    await fake.stop()
    #expect(history.revision == "r9" && history.signedTransactions.isEmpty)
    let seen = fake.seen
    #expect(seen.map(\.path) == ["/inApps/v2/history/1"])
    #expect(seen.first?.query["revision"] == "r8")
  }

  @Test(
    "Apple's errors map to typed errors",
    arguments: [
      (404, 4_040_010, AppStoreServerAPIError.Code.notFound, 1),
      (404, 4_040_005, .notFound, 1),
      (401, 0, .keyRefused, 1),
      (400, 4_000_006, .rejected, 1),
      (429, 4_290_000, .unavailable, 3),
      (500, 5_000_000, .unavailable, 3),
      (404, 4_040_006, .unavailable, 3),  // OriginalTransactionIdNotFoundRetryableError
    ])
  func errors(status: Int, code: Int64, expected: AppStoreServerAPIError.Code, attempts: Int) async throws {
    let fake = try FakeAppleServer { _, _ in
      status == 401 ? HTTPResponse(status: 401) : appleError(status, code)
    }
    do {
      _ = try await fake.client().transactionInfo(
        transactionId: "42", environment: .production, authorizer: FixedTokenAuthorizer(), nowMs: 0)
      Issue.record("expected \(expected)")
    } catch {
      #expect(error.code == expected)
      #expect(error.httpStatus == status)
      if status != 401 { #expect(error.apiErrorCode == code) }
    }
    await fake.stop()
    #expect(fake.seen.count == attempts)
  }

  @Test("a temporary failure is retried with backoff and then succeeds")
  func retryThenSuccess() async throws {
    let fake = try FakeAppleServer { _, n in
      n == 1 ? appleError(429, 4_290_000) : n == 2 ? HTTPResponse(status: 503) : json(.object(["signedTransactionInfo": .string("jws")]))
    }
    let jws = try await fake.client().transactionInfo(
      transactionId: "42", environment: .production, authorizer: FixedTokenAuthorizer(), nowMs: 0)
    await fake.stop()
    #expect(jws == "jws")
    #expect(fake.seen.count == 3)
  }

  @Test("an unreachable server is UNAVAILABLE after the bounded attempts; a bad id never leaves the process")
  func unreachableAndBadID() async throws {
    let fake = try FakeAppleServer { _, _ in HTTPResponse(status: 200) }
    let client = fake.client(maxAttempts: 2)
    await fake.stop()
    await #expect(throws: AppStoreServerAPIError.self) {
      _ = try await client.transactionInfo(transactionId: "1", environment: .production, authorizer: FixedTokenAuthorizer(), nowMs: 0)
    }
    do {
      _ = try await client.transactionInfo(transactionId: "1", environment: .production, authorizer: FixedTokenAuthorizer(), nowMs: 0)
    } catch { #expect(error.code == .unavailable) }
    do {
      _ = try await client.transactionInfo(transactionId: "../admin", environment: .production, authorizer: FixedTokenAuthorizer(), nowMs: 0)
      Issue.record("a path in the id was accepted")
    } catch { #expect(error.code == .rejected) }
  }

  @Test("a 2xx body without the fields is a malformed response, not an empty history")
  func malformed() async throws {
    let fake = try FakeAppleServer { _, _ in json(.object(["hasMore": .bool(false)])) }
    do {
      _ = try await fake.client().transactionHistory(
        transactionId: "1", revision: nil, environment: .production, authorizer: FixedTokenAuthorizer(), nowMs: 0)
      Issue.record("expected malformedResponse")
    } catch { #expect(error.code == .malformedResponse) }
    await fake.stop()
  }

  @Test("all subscription statuses: one item per lastTransactions entry, with its group")
  func statuses() async throws {
    let fake = try FakeAppleServer { _, _ in
      json(
        .object([
          "environment": .string("Production"), "bundleId": .string("com.example"),
          "data": .array([
            .object([
              "subscriptionGroupIdentifier": .string("g1"),
              "lastTransactions": .array([
                .object([
                  "originalTransactionId": .string("100"), "status": .integer(1),
                  "signedTransactionInfo": .string("t"), "signedRenewalInfo": .string("r"),
                ]),
                .object(["originalTransactionId": .string("200"), "status": .integer(5)]),
              ]),
            ])
          ]),
        ]))
    }
    let items = try await fake.client().allSubscriptionStatuses(
      transactionId: "100", environment: .production, authorizer: FixedTokenAuthorizer(), nowMs: 0)
    await fake.stop()
    #expect(
      items == [
        LastTransactionsItem(subscriptionGroupIdentifier: "g1", originalTransactionId: "100", rawStatus: 1, signedTransactionInfo: "t", signedRenewalInfo: "r"),
        LastTransactionsItem(subscriptionGroupIdentifier: "g1", originalTransactionId: "200", rawStatus: 5, signedTransactionInfo: nil, signedRenewalInfo: nil),
      ])
    #expect(fake.seen.map(\.path) == ["/inApps/v1/subscriptions/100"])
  }

  @Test("notification history: POSTs the window and follows paginationToken to the last page")
  func notificationHistory() async throws {
    let fake = try FakeAppleServer { request, _ in
      let token = request.query("paginationToken")
      var object: JSONObject = [
        "notificationHistory": .array([
          .object([
            "signedPayload": .string("payload-\(token ?? "first")"),
            "sendAttempts": .array([.object(["attemptDate": .integer(1), "sendAttemptResult": .string("TIMED_OUT")])]),
          ])
        ]),
        "hasMore": .bool(token == nil),
      ]
      if token == nil { object.append("paginationToken", .string("p2")) }
      return json(.object(object))
    }
    let items = try await fake.client().notificationHistory(
      startMs: 1000, endMs: 2000, environment: .production, authorizer: FixedTokenAuthorizer(), nowMs: 0)
    await fake.stop()
    #expect(items.map(\.signedPayload) == ["payload-first", "payload-p2"])
    #expect(items.first?.sendAttemptResults == ["TIMED_OUT"])
    let seen = fake.seen
    #expect(seen.map(\.method) == ["POST", "POST"])
    #expect(seen.map { $0.query["paginationToken"] } == [nil, "p2"])
    let body = try JSONValue(parsing: seen[0].body)
    #expect(body["startDate"]?.int64Value == 1000 && body["endDate"]?.int64Value == 2000)
  }
}
