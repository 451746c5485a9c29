import Foundation
import SubstatusClock
import SubstatusJSON
import SubstatusService

extension SubstatusDaemon {
  /// Reads the clock of `--clock-url` (tests only): `GET url` must answer 200 with a JSON object
  /// whose `now_ms` is the followed time (the App Store simulator's `/control/clock`), within 2 s.
  static func clockReading(_ url: URL, requester: any HTTPRequester) -> FollowedClock.Reading {
    return {
      let (status, body) = try await requester.send(method: "GET", url: url, headers: [], body: nil, timeout: .seconds(2))
      guard status == 200 else { throw ClockReadingError(description: "GET \(url) answered \(status)") }
      guard let now = (try? JSONValue(parsing: body))?["now_ms"]?.int64Value else {
        throw ClockReadingError(description: "GET \(url) answered no now_ms")
      }
      return now
    }
  }

  /// Why the followed clock could not be read.
  struct ClockReadingError: Error, CustomStringConvertible {
    var description: String
  }
}
