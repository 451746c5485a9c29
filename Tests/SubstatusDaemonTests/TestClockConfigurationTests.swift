import Foundation
import SubstatusService
import Testing

@testable import SubstatusDaemon

/// `--clock-url` (tests only): a loopback `http://` URL from the flag, the environment or the
/// config file; anything else is refused; its `GET` must answer `{"now_ms": N}`.
@Suite struct TestClockConfigurationTests {
  static func parse(_ arguments: [String], environment: [String: String] = [:], file: String? = nil) throws
    -> DaemonConfiguration
  {
    try WebhookConfigurationTests.parse(arguments, environment: environment, file: file)
  }

  @Test func theSystemClockByDefault() throws {
    #expect(try Self.parse([]).clockURL == nil)
  }

  @Test(arguments: [
    "http://127.0.0.1:4010/control/clock", "http://[::1]:4010/control/clock", "http://localhost:4010/control/clock",
    "http://127.0.0.2/clock",
  ])
  func loopbackURLsAreTaken(url: String) throws {
    #expect(try Self.parse(["--clock-url", url]).clockURL == url)
  }

  @Test func fromTheEnvironmentAndTheConfigFile() throws {
    let url = "http://127.0.0.1:9/control/clock"
    #expect(try Self.parse([], environment: ["SUBSTATUS_CLOCK_URL": url]).clockURL == url)
    #expect(try Self.parse([], file: #"{"clock_url": "\#(url)"}"#).clockURL == url)
  }

  @Test(arguments: [
    ("http://10.0.0.5:4010/control/clock", "must point at this machine"),
    ("http://sim.example.com/control/clock", "must point at this machine"),
    ("http://128.0.0.1/clock", "must point at this machine"),
    ("http://127.0.0.1.example.com/clock", "must point at this machine"),
    ("https://127.0.0.1/clock", "must be an http:// URL"),
    ("127.0.0.1:4010", "must be an http:// URL"),
  ])
  func otherURLsAreRefused(url: String, message: String) throws {
    let error = #expect(throws: DaemonConfiguration.UsageError.self) { _ = try Self.parse(["--clock-url", url]) }
    #expect(error?.description.contains(message) == true, "\(error?.description ?? "")")
  }

  @Test func helpNamesItAsForTestsOnly() {
    #expect(DaemonConfiguration.help.contains("--clock-url URL"))
    #expect(DaemonConfiguration.help.contains("tests only"))
  }

  /// A requester that answers one fixed response.
  struct Answer: HTTPRequester {
    var status: Int
    var body: String

    func send(method: String, url: URL, headers: [(String, String)], body: [UInt8]?, timeout: Duration)
      async throws -> (status: Int, body: [UInt8])
    {
      (status, Array(self.body.utf8))
    }
  }

  @Test func theReadingTakesNowMsAndRefusesAnythingElse() async throws {
    let url = try #require(URL(string: "http://127.0.0.1:9/control/clock"))
    let read = SubstatusDaemon.clockReading(url, requester: Answer(status: 200, body: #"{"now_ms": 1700000000123, "time_scale": 0}"#))
    #expect(try await read() == 1_700_000_000_123)
    for (status, body) in [(200, "{}"), (200, "not json"), (503, #"{"now_ms": 1}"#)] {
      await #expect(throws: SubstatusDaemon.ClockReadingError.self) {
        _ = try await SubstatusDaemon.clockReading(url, requester: Answer(status: status, body: body))()
      }
    }
  }
}
