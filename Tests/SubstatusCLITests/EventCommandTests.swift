import RPCCore
import SubstatusClientTestKit
import SubstatusWire
import Synchronization
import Testing

/// `substatus events …` and `substatus webhook …` (docs/architecture.md "The CLI contract") against
/// a fake server: the requests they send, what they print, and their usage errors.
@Suite("substatus events and webhook commands")
struct EventCommandTests {
  static let renewed = message(Substatus_V1_Event.self) {
    $0.eventID = "ev_1"
    $0.appID = "app_1"
    $0.userID = "alice"
    $0.type = .renewed
    $0.occurredMs = newYear2026
    $0.productID = "pro.monthly"
    $0.stateBefore = .active
    $0.stateAfter = .active
    $0.cursor = "c1"
  }

  static let webhook = message(Substatus_V1_Webhook.self) {
    $0.webhookID = "wh_1"
    $0.appID = "app_1"
    $0.url = "https://hooks.example.com/substatus"
    $0.eventTypes = [.billingIssue, .expired]
    $0.createdMs = newYear2026
    $0.secretFingerprint = "sha256:00112233"
  }

  /// A fake EventService; WatchEvents streams `watched` then ends.
  static func router(log: CallLog, watched: [Substatus_V1_Event] = []) -> RPCRouter {
    var router = RPCRouter()
    router.fake(Substatus_V1_EventService.listEvents, log: log) { _, _ in
      message { $0.events = [renewed]; $0.nextCursor = "c1" }
    }
    router.fake(Substatus_V1_EventService.createWebhook, log: log) { _, _ in
      message { $0.webhook = webhook; $0.signingSecret = "whsec_" + String(repeating: "ab", count: 32) }
    }
    router.fake(Substatus_V1_EventService.listWebhooks, log: log) { _, _ in message { $0.webhooks = [webhook] } }
    router.fake(Substatus_V1_EventService.replayEvents, log: log) { _, _ in message { $0.deliveriesCreated = 7 } }
    router.fake(Substatus_V1_EventService.testWebhook, log: log) { _, _ in
      message {
        $0.delivered = false
        $0.attempt = message { $0.httpStatus = 500; $0.durationMs = 12; $0.attemptedMs = newYear2026 }
      }
    }
    router.registerServerStreaming(
      method: Substatus_V1_EventService.watchEvents.path, request: Substatus_V1_WatchEventsRequest.self,
      response: Substatus_V1_WatchEventsResponse.self
    ) { request, responses, context in
      log.record(request.serializedBytes(), context)
      for event in watched { await responses.send(message { $0.event = event }) }
    }
    return router
  }

  @Test func eventsListSendsTheFiltersAndPrintsATableWithTheNextCursor() async throws {
    let log = CallLog()
    let run = try await withFakeServer(Self.router(log: log)) { transport in
      await runCLI(
        ["events", "list", "app_1", "--user", "alice", "--type", "renewed,EVENT_TYPE_EXPIRED", "--since", "c0",
         "--limit", "50"], transport: transport)
    }
    #expect(run.status == 0, "\(run.stderr)")
    let request = try Substatus_V1_ListEventsRequest(serializedBytes: try #require(log.all.first).request)
    #expect(request.appID == "app_1" && request.userID == "alice" && request.sinceCursor == "c0" && request.limit == 50)
    #expect(request.types == [.renewed, .expired])
    #expect(run.stdout.contains("OCCURRED"))
    #expect(run.stdout.contains("2026-01-01T00:00:00Z  RENEWED  alice  pro.monthly  ACTIVE→ACTIVE  ev_1"))
    #expect(run.stdout.hasSuffix("next cursor: c1\n"))
  }

  @Test func eventsTailPrintsEachEventAsItArrivesWithNoDeadline() async throws {
    let log = CallLog()
    let run = try await withFakeServer(Self.router(log: log, watched: [Self.renewed, Self.renewed])) { transport in
      await runCLI(["events", "tail", "app_1", "--since", "c0", "--json"], transport: transport)
    }
    #expect(run.status == 0, "\(run.stderr)")
    let lines = run.stdout.split(separator: "\n")
    #expect(lines.count == 2)
    #expect(try lines.allSatisfy { try Substatus_V1_Event(jsonString: String($0)) == Self.renewed })
    let call = try #require(log.all.first)
    #expect(call.timeRemaining == nil, "the CLI's default deadline does not apply to a stream")
    #expect(try Substatus_V1_WatchEventsRequest(serializedBytes: call.request).sinceCursor == "c0")
  }

  @Test func webhookAddPrintsTheIdAndTheSecretOnce() async throws {
    let log = CallLog()
    let run = try await withFakeServer(Self.router(log: log)) { transport in
      await runCLI(
        ["webhook", "add", "app_1", "--url", "https://hooks.example.com/substatus", "--events", "BILLING_ISSUE,EXPIRED"],
        transport: transport)
    }
    #expect(run.status == 0, "\(run.stderr)")
    let request = try Substatus_V1_CreateWebhookRequest(serializedBytes: try #require(log.all.first).request)
    #expect(request.url == "https://hooks.example.com/substatus" && request.eventTypes == [.billingIssue, .expired])
    #expect(run.stdout.contains("webhook id          wh_1"))
    #expect(run.stdout.contains("signing secret      whsec_abab"))
    #expect(run.stdout.contains("events              BILLING_ISSUE,EXPIRED"))
  }

  @Test func webhookTestExitsOneWhenTheReceiverDoesNotAnswer2xx() async throws {
    let log = CallLog()
    let run = try await withFakeServer(Self.router(log: log)) { transport in
      await runCLI(["webhook", "test", "app_1", "wh_1"], transport: transport)
    }
    #expect(run.status == 1)
    #expect(run.stdout.contains("delivered    no"))
    #expect(run.stdout.contains("http status  500"))
    #expect(run.stderr == "substatus: the receiver did not answer 2xx\n")
  }

  @Test func eventsReplayNeedsSinceAndSendsTheWebhook() async throws {
    let missing = await runCLI(["events", "replay", "app_1"])
    #expect(missing.status == 2)
    #expect(missing.stderr.contains("--since"))
    let log = CallLog()
    let run = try await withFakeServer(Self.router(log: log)) { transport in
      await runCLI(["events", "replay", "app_1", "--since", "", "--webhook", "wh_1"], transport: transport)
    }
    #expect(run.status == 0, "\(run.stderr)")
    #expect(run.stdout == "deliveries created: 7\n")
    let request = try Substatus_V1_ReplayEventsRequest(serializedBytes: try #require(log.all.first).request)
    #expect(request.sinceCursor == "" && request.webhookID == "wh_1")
  }

  @Test(arguments: [
    (["events", "list", "app_1", "--type", "RENEWAL"], "unknown event type 'RENEWAL'"),
    (["events", "list", "app_1", "--type", "UNSPECIFIED"], "unknown event type 'UNSPECIFIED'"),
    (["events", "list", "app_1", "--limit", "1001"], "--limit is at most 1000"),
    (["webhook", "add", "app_1"], "--url"),
    (["webhook", "remove", "app_1"], "WEBHOOK_ID"),
  ])
  func usageErrorsExitTwoBeforeConnecting(arguments: [String], message: String) async {
    let run = await runCLI(arguments)
    #expect(run.status == 2)
    #expect(run.stderr.contains(message), "\(run.stderr)")
    #expect(run.connected.isEmpty)
  }
}
