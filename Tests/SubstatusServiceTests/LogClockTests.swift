import SubstatusClock
import SubstatusJSON
import SubstatusWire
import Synchronization
import Testing

@testable import SubstatusService

@Suite("Log times and RPC durations come from the injected clock")
struct LogClockTests {
  @Test("LogSink stamps each line with its clock's wall time")
  func logLinesAreStampedByTheClock() throws {
    let clock = ManualClock(wallMs: 1_000)
    let lines = Mutex<[String]>([])
    let log = LogSink({ line in lines.withLock { $0.append(line) } }, clock: clock)
    log.info("first")
    clock.advance(by: .seconds(2))
    log.with(clock: ManualClock(wallMs: 42)).info("other clock")
    log.info("second")
    let stamps = try lines.withLock { $0 }.map { try JSONValue(parsing: Array($0.utf8))["ts"]?.int64Value }
    #expect(stamps == [1_000, 42, 3_000])
  }

  @Test("the access log line of an RPC has the clock's time and a duration measured on it")
  func accessLogUsesTheClock() async throws {
    try await withService { h in
      var create = Substatus_V1_CreateTenantRequest()
      create.name = "acme"
      _ = try await h.call(Substatus_V1_TenantService.createTenant, create, key: h.operatorKey)
      let line = try #require(h.world.lines.withLock { $0 }.last { $0.contains(#""msg":"rpc""#) })
      let json = try JSONValue(parsing: Array(line.utf8))
      #expect(json["ts"]?.int64Value == h.world.clock.wallMs)
      // The manual clock did not move during the call: a real clock would measure some time.
      #expect(json["duration_ms"]?.doubleValue == 0)
    }
  }
}
