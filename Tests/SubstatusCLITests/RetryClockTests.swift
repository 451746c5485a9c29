import RPCCore
import SubstatusClientTestKit
import SubstatusClock
import SubstatusWire
import Testing

@Suite("The CLI's retries run on its environment's clock")
struct CLIRetryClockTests {
  @Test("a read answered UNAVAILABLE twice is retried after the default backoffs, waited on the clock")
  func retriesWaitOnTheClock() async throws {
    let log = CallLog()
    var router = RPCRouter()
    router.fake(Substatus_V1_AdminService.getApp, log: log) { request, count in
      if count <= 2 { throw RPCError(code: .unavailable, message: "try again") }
      var response = Substatus_V1_GetAppResponse()
      response.app = message(Substatus_V1_App.self) { $0.appID = request.appID }
      return response
    }
    let clock = ManualClock()
    let run = try await withFakeServer(router) { transport in
      let cli = Task { await runCLI(["app", "show", "app_1", "--json"], transport: transport, clock: clock) }
      // RetryPolicy.default: 200 ms, then 400 ms, each at least half of it.
      for (retry, ceiling) in [(1, 200), (2, 400)] {
        #expect(await clock.waitForSleepers(1))
        #expect(log.count == retry)
        clock.advance(by: .milliseconds(ceiling))
      }
      return await cli.value
    }
    #expect(run.status == 0, "\(run.stderr)")
    #expect(run.stdout.contains("app_1"))
    #expect(log.count == 3)
  }
}
