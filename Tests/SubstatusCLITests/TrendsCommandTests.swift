import Foundation
@testable import SubstatusCLI
import RPCCore
import SubstatusClientTestKit
import SubstatusWire
import Testing

/// 2024-01-01T00:00:00Z and the next months' firsts, in milliseconds.
private let jan: Int64 = 1_704_067_200_000
private let feb: Int64 = 1_706_745_600_000
private let mar: Int64 = 1_709_251_200_000
private let apr: Int64 = 1_711_929_600_000

private func amounts(_ pairs: [(String, Int64)]) -> [Substatus_V1_CurrencyAmount] {
  pairs.map { pair in
    message {
      $0.currency = pair.0
      $0.amountMilliunits = pair.1
    }
  }
}

/// Three monthly buckets: trials converting, a refund, two currencies, an unpriced subscription.
private let cannedTrends = message(Substatus_V1_GetTrendsResponse.self) {
  $0.appID = "app_1"
  $0.environment = .production
  $0.interval = .month
  $0.currencies = ["EUR", "USD"]
  $0.buckets = [
    message {
      $0.startMs = jan
      $0.endMs = feb
      $0.activeSubscribers = 3
      $0.activeTrials = 2
      $0.trialsStarted = 2
      $0.newPaidSubscriptions = 1
      $0.revenue = amounts([("USD", 9990)])
      $0.mrr = amounts([("USD", 9990)])
    },
    message {
      $0.startMs = feb
      $0.endMs = mar
      $0.activeSubscribers = 4
      $0.trialsConverted = 1
      $0.trialsLapsed = 1
      $0.trialConversionRate = 0.5
      $0.newPaidSubscriptions = 1
      $0.renewals = 1
      $0.refunds = 1
      $0.billingIssues = 1
      $0.revenue = amounts([("EUR", 2990), ("USD", 19980)])
      $0.refundedRevenue = amounts([("USD", 9990)])
      $0.mrr = amounts([("EUR", 12957), ("USD", 9990)])
      $0.mrrUnpricedSubscriptions = 1
    },
    message {
      $0.startMs = mar
      $0.endMs = apr
      $0.activeSubscribers = 2
      $0.renewals = 2
      $0.churned = 2
      $0.billingRecoveries = 1
      $0.unpricedPurchases = 1
      $0.revenue = amounts([("EUR", 2990), ("USD", 9990)])
      $0.mrr = amounts([("EUR", 12957), ("USD", 9990)])
    },
  ]
}

@Suite("substatus report trends")
struct TrendsCommandTests {
  private func run(_ arguments: [String]) async throws -> (CLIRun, Substatus_V1_GetTrendsRequest?) {
    let log = CallLog()
    var router = RPCRouter()
    router.fake(Substatus_V1_ReportService.getTrends, log: log, reply: cannedTrends)
    let run = try await withFakeServer(router) { transport in
      await runCLI(arguments, transport: transport)
    }
    let request = try log.all.last.map { try Substatus_V1_GetTrendsRequest(serializedBytes: $0.request) }
    return (run, request)
  }

  private let arguments = [
    "report", "trends", "app_1", "--from", "2024-01-01", "--to", "2024-04-01", "--interval", "month",
  ]

  @Test("the terminal table: one row per series with its sparkline, revenue and MRR per currency")
  func terminal() async throws {
    let (run, request) = try await run(arguments)
    #expect(run.status == 0, "stderr: \(run.stderr)")
    #expect(run.stdout == String(decoding: try fixtureBytes("trends_table.txt"), as: UTF8.self))
    #expect(request?.appID == "app_1")
    #expect(request?.fromMs == jan)
    #expect(request?.toMs == apr)
    #expect(request?.interval == .month)
    #expect(request?.environment == .unspecified)
  }

  @Test("--csv: a header and one row per bucket, a column per currency")
  func csv() async throws {
    let (run, _) = try await run(arguments + ["--csv"])
    #expect(run.status == 0, "stderr: \(run.stderr)")
    #expect(run.stdout == String(decoding: try fixtureBytes("trends.csv"), as: UTF8.self))
  }

  @Test("--json prints the response")
  func json() async throws {
    let (run, _) = try await run(arguments + ["--json"])
    #expect(run.status == 0, "stderr: \(run.stderr)")
    #expect(run.stdout == String(decoding: try fixtureBytes("trends.json"), as: UTF8.self))
    #expect(try Substatus_V1_GetTrendsResponse(jsonString: run.stdout) == cannedTrends)
  }

  @Test("the interval defaults to days; --environment is sent")
  func defaults() async throws {
    let (run, request) = try await run([
      "report", "trends", "app_1", "--from", "2024-02-28", "--to", "2024-03-01", "--environment", "sandbox",
    ])
    #expect(run.status == 0, "stderr: \(run.stderr)")
    #expect(request?.interval == .day)
    #expect(request?.environment == .sandbox)
    #expect(request?.fromMs == feb + 27 * 86_400_000)
    #expect(request?.toMs == mar)
  }

  @Test(
    "bad dates and flags are usage errors, before any call",
    arguments: [
      (["--from", "2024-02-30", "--to", "2024-03-01"], "--from needs a date YYYY-MM-DD, not '2024-02-30'"),
      (["--from", "2024-1-01", "--to", "2024-03-01"], "--from needs a date YYYY-MM-DD, not '2024-1-01'"),
      (["--from", "2024-01-01", "--to", "tomorrow"], "--to needs a date YYYY-MM-DD, not 'tomorrow'"),
      (["--from", "2024-03-01", "--to", "2024-03-01"], "--to must be after --from"),
      (["--from", "2024-01-01", "--to", "2024-03-01", "--interval", "year"], "--interval must be one of"),
      (["--from", "2024-01-01", "--to", "2024-03-01", "--csv", "--json"], "--csv and --json cannot be combined"),
      (["--to", "2024-03-01"], "missing required flag --from"),
    ])
  func usage(flags: [String], message: String) async throws {
    let (run, request) = try await run(["report", "trends", "app_1"] + flags)
    #expect(run.status == 2)
    #expect(run.stderr.contains(message), "stderr: \(run.stderr)")
    #expect(request == nil)
  }

  @Test("`report APP` is still the counts command")
  func reportStillWorks() throws {
    let parsed = try parseArguments(["report", "app_1"], commands: commandTable)
    #expect(parsed.command?.name == "report")
    #expect(parsed.positionals == ["app_1"])
    let trends = try parseArguments(["report", "trends", "app_1", "--from", "2024-01-01", "--to", "2024-01-02"], commands: commandTable)
    #expect(trends.command?.name == "report trends")
    #expect(trends.positionals == ["app_1"])
  }

  @Test(
    "sparklines scale from zero (or the least value) to the greatest",
    arguments: [
      ([0, 0, 0], "▁▁▁"), ([5, 5], "██"), ([0, 7, 14], "▁▅█"), ([1, 2, 3, 4, 5, 6, 7, 8], "▂▃▄▅▅▆▇█"),
      ([-2, 0, 2], "▁▅█"), ([], ""),
    ] as [([Double], String)])
  func sparkline(values: [Double], expected: String) {
    #expect(TrendsTable.sparkline(values) == expected)
  }

  @Test(
    "amounts in units of the currency",
    arguments: [(9990, "9.99"), (12957, "12.957"), (0, "0.00"), (160_000, "160.00"), (-1500, "-1.50"), (5, "0.005")]
      as [(Int64, String)])
  func amount(milliunits: Int64, expected: String) {
    #expect(TrendsTable.amount(milliunits) == expected)
  }
}
