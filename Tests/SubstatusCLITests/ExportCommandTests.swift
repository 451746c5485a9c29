import RPCCore
import SubstatusClientTestKit
import SubstatusWire
import Synchronization
import Testing

/// `substatus export events` (docs/architecture.md "The CLI contract") against a fake EventService
/// whose log spans several pages: every page is read, in order, and written as NDJSON or CSV.
@Suite("substatus export events")
struct ExportCommandTests {
  static func event(_ index: Int, _ build: (inout Substatus_V1_Event) -> Void = { _ in }) -> Substatus_V1_Event {
    message {
      $0.eventID = "ev_\(index)"
      $0.appID = "app_1"
      $0.userID = "user-\(index)"
      $0.environment = .production
      $0.type = .renewed
      $0.occurredMs = newYear2026 + Int64(index) * 1000
      $0.detectedMs = newYear2026 + Int64(index) * 1000 + 5
      $0.productID = "pro.monthly"
      $0.stateBefore = .active
      $0.stateAfter = .active
      $0.cursor = "c\(index)"
      build(&$0)
    }
  }

  /// The log: pages of two events after "" and "c2", then nothing after "c3".
  static let pages: [String: [Substatus_V1_Event]] = [
    "": [event(1), event(2) { $0.productID = "pro, \"yearly\"\nplan"; $0.priceMilliunits = 9990; $0.currency = "EUR" }],
    "c2": [event(3) { $0.type = .ownershipTransferred; $0.previousUserID = "user-0"; $0.ownership = .purchased }],
    "c3": [],
  ]

  static func router(log: CallLog) -> RPCRouter {
    var router = RPCRouter()
    router.fake(Substatus_V1_EventService.listEvents, log: log) { request, _ in
      let events = pages[request.sinceCursor] ?? []
      return message { $0.events = events; $0.nextCursor = events.last?.cursor ?? request.sinceCursor }
    }
    return router
  }

  static func requests(_ log: CallLog) throws -> [Substatus_V1_ListEventsRequest] {
    try log.all.map { try Substatus_V1_ListEventsRequest(serializedBytes: $0.request) }
  }

  @Test func ndjsonWritesEveryPageInLogOrderAndEndsWithTheCursor() async throws {
    let log = CallLog()
    let run = try await withFakeServer(Self.router(log: log)) { transport in
      await runCLI(["export", "events", "app_1"], transport: transport)
    }
    #expect(run.status == 0, "\(run.stderr)")
    let lines = run.stdout.split(separator: "\n", omittingEmptySubsequences: false)
    #expect(lines.count == 4 && lines.last == "")
    let decoded = try lines.dropLast().map { try Substatus_V1_Event(jsonString: String($0)) }
    #expect(decoded == [Self.pages[""]![0], Self.pages[""]![1], Self.pages["c2"]![0]])
    #expect(try Self.requests(log).map(\.sinceCursor) == ["", "c2", "c3"])
    #expect(try Self.requests(log).allSatisfy { $0.appID == "app_1" && $0.limit == 1000 && $0.types.isEmpty })
    #expect(run.stderr.contains("exported 3 events; continue with --since 'c3'"))
  }

  @Test func sinceStartsAfterTheCursor() async throws {
    let log = CallLog()
    let run = try await withFakeServer(Self.router(log: log)) { transport in
      await runCLI(["export", "events", "app_1", "--since", "c2"], transport: transport)
    }
    #expect(run.status == 0, "\(run.stderr)")
    #expect(run.stdout.split(separator: "\n").count == 1 && run.stdout.contains("\"eventId\":\"ev_3\""))
    #expect(try Self.requests(log).map(\.sinceCursor) == ["c2", "c3"])
  }

  @Test func csvHasAHeaderEveryFieldAndRFC4180Quoting() async throws {
    let log = CallLog()
    let run = try await withFakeServer(Self.router(log: log)) { transport in
      await runCLI(["export", "events", "app_1", "--format", "CSV"], transport: transport)
    }
    #expect(run.status == 0, "\(run.stderr)")
    #expect(run.stdout.hasPrefix(
      "event_id,cursor,app_id,user_id,environment,type,occurred_ms,occurred,detected_ms,detected,"
        + "subscription_group_id,product_id,transaction_id,original_transaction_id,state_before,state_after,"
        + "offer,offer_id,price_milliunits,currency,expiration_reason,previous_product_id,previous_user_id,"
        + "ownership,consumption_body,consumption_detail,refund_request_reason\r\n"))
    #expect(run.stdout.contains(
      "ev_1,c1,app_1,user-1,PRODUCTION,RENEWED,1767225601000,2026-01-01T00:00:01Z,1767225601005,"
        + "2026-01-01T00:00:01.005Z,,pro.monthly,,,ACTIVE,ACTIVE,,,,,,,,,,,\r\n"))
    #expect(run.stdout.contains(",\"pro, \"\"yearly\"\"\nplan\",,,ACTIVE,ACTIVE,,,9990,EUR,,,,,,,\r\n"))
    #expect(run.stdout.contains(",OWNERSHIP_TRANSFERRED,") && run.stdout.contains(",user-0,PURCHASED,,,\r\n"))
    #expect(run.stdout.components(separatedBy: "\r\n").count == 5)  // header, 3 rows, the empty tail
  }

  @Test(arguments: [
    (["export", "events", "app_1", "--format", "xml"], "--format must be one of ndjson, csv"),
    (["export", "events", "app_1", "--json"], "--json does not apply"),
    (["export", "events"], "APP"),
  ])
  func usageErrors(arguments: [String], message: String) async throws {
    let log = CallLog()
    let run = try await withFakeServer(Self.router(log: log)) { transport in
      await runCLI(arguments, transport: transport)
    }
    #expect(run.status == 2)
    #expect(run.stderr.contains(message), "\(run.stderr)")
    #expect(log.all.isEmpty)
  }

  @Test func aFailedPageEndsTheExportWithTheServersStatus() async throws {
    var router = RPCRouter()
    let log = CallLog()
    router.fake(Substatus_V1_EventService.listEvents, log: log) { request, _ in
      guard request.sinceCursor.isEmpty else { throw RPCError(code: .notFound, message: "app not found") }
      return message { $0.events = [Self.event(1)]; $0.nextCursor = "c1" }
    }
    let run = try await withFakeServer(router) { transport in
      await runCLI(["export", "events", "app_1"], transport: transport)
    }
    #expect(run.status != 0)
    #expect(run.stdout.contains("\"eventId\":\"ev_1\""))
    #expect(run.stderr.contains("app not found"))
  }
}
