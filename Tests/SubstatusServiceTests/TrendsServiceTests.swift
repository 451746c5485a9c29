import Testing
import RPCCore
import SubstatusWire
@testable import SubstatusService

/// 2024-01-01T00:00:00Z in milliseconds, and a day.
private let jan1: Int64 = 1_704_067_200_000
private let day: Int64 = 86_400_000

@Suite("ReportService.GetTrends: requests")
struct TrendsRequestTests {
  private func trends(
    _ h: Harness, _ admin: String, _ app: String, _ build: (inout Substatus_V1_GetTrendsRequest) -> Void
  ) async throws -> Substatus_V1_GetTrendsResponse {
    var request = Substatus_V1_GetTrendsRequest()
    request.appID = app
    request.fromMs = jan1
    request.toMs = jan1 + 7 * day
    build(&request)
    return try await h.call(Substatus_V1_ReportService.getTrends, request, key: admin)
  }

  @Test(
    "a bad range is INVALID_ARGUMENT naming the field",
    arguments: [
      (jan1 + 1, jan1 + day, Substatus_V1_TrendInterval.day, "from_ms"),
      (jan1, jan1 + day + 1000, .day, "to_ms"),
      (jan1, jan1, .day, "to_ms"),
      (jan1 + day, jan1, .week, "to_ms"),
      (jan1, jan1 + 1001 * day, .day, "interval"),
      (jan1, jan1 + day, .UNRECOGNIZED(9), "interval"),
    ])
  func invalid(from: Int64, to: Int64, interval: Substatus_V1_TrendInterval, field: String) async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let error = await #expect(throws: RPCError.self) {
        try await trends(h, admin, app) {
          $0.fromMs = from
          $0.toMs = to
          $0.interval = interval
        }
      }
      #expect(error?.code == .invalidArgument)
      #expect(try violatedField(error) == field)
    }
  }

  @Test("an unknown environment is INVALID_ARGUMENT; another tenant's app is NOT_FOUND")
  func environmentAndApp() async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let (otherAdmin, _) = try await h.makeTenantWithApp(name: "other", bundleID: "com.other.app")
      let badEnvironment = await #expect(throws: RPCError.self) {
        try await trends(h, admin, app) { $0.environment = .UNRECOGNIZED(7) }
      }
      #expect(try violatedField(badEnvironment) == "environment")
      let otherTenant = await #expect(throws: RPCError.self) { try await trends(h, otherAdmin, app) { _ in } }
      #expect(otherTenant?.code == .notFound)
    }
  }
}
