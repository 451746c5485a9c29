import Foundation
import SubstatusProcessTestKit
import HTTPServer

#if canImport(Glibc)
  import Glibc
#endif
import SubstatusJSON
import Testing

@testable import AppStoreSimulator

private let app = "/control/apps/com.example.app"

/// A sandbox user `sb` and a production user `pr`, each subscribed; returns their receipts.
private func subscribedUsers(_ sim: Sim) async throws -> (sandbox: String, production: String) {
  try await sim.ok("POST", "/control/apps", catalog())
  try await sim.ok("POST", "/control/users", #"{"user_id":"sb","environment":"sandbox"}"#)
  try await sim.ok("POST", "/control/users", #"{"user_id":"pr","environment":"production"}"#)
  let sandbox = try await sim.ok("POST", "\(app)/users/sb/purchase", #"{"product_id":"pro.monthly"}"#)
  let production = try await sim.ok("POST", "\(app)/users/pr/purchase", #"{"product_id":"pro.monthly"}"#)
  return (try #require(sandbox["receipt"]?.string), try #require(production["receipt"]?.string))
}

@Suite("verifyReceipt statuses and faults")
struct VerifyReceiptTests {
  @Test func statusCodesWhereTheyApply() async throws {
    let sim = try Sim()
    let (sandbox, production) = try await subscribedUsers(sim)
    #expect(try await sim.verify(sandbox, environment: "production")["status"]?.int64 == 21007)
    #expect(try await sim.verify(production, environment: "sandbox")["status"]?.int64 == 21008)
    #expect(try await sim.verify(sandbox, environment: "sandbox")["status"]?.int64 == 0)
    #expect(try await sim.verify(production, environment: "production")["environment"]?.string == "Production")
    // The legacy production URL.
    let (_, legacy) = try await call(
      "POST", sim.base, "/verifyReceipt", #"{"receipt-data":"\#(production)","password":"s3cret"}"#)
    #expect(legacy["status"]?.int64 == 0)
    #expect(try await sim.verify(production, password: "wrong")["status"]?.int64 == 21004)
    #expect(try await sim.verify(production, password: nil)["status"]?.int64 == 21003)
    #expect(try await sim.verify("!!!not base64!!!")["status"]?.int64 == 21002)
    #expect(try await sim.verify(Data("hello:world".utf8).base64EncodedString())["status"]?.int64 == 21002)
    let (_, notJSON) = try await call("POST", sim.base, "/production/verifyReceipt", "receipt-data=abc")
    #expect(notJSON["status"]?.int64 == 21002)
    let (_, get) = try await call("GET", sim.base, "/production/verifyReceipt")
    #expect(get["status"]?.int64 == 21000)
    try await sim.ok("DELETE", "/control/users/pr")
    #expect(try await sim.verify(production)["status"]?.int64 == 21010)
    await sim.stop()
  }

  @Test func iOS6TransactionReceiptsAnswer21006OnceExpired() async throws {
    let sim = try Sim()
    try await sim.ok("POST", "/control/apps", catalog())
    try await sim.ok("POST", "/control/users", #"{"user_id":"old","environment":"production"}"#)
    let bought = try await sim.ok("POST", "\(app)/users/old/purchase", #"{"product_id":"pro.monthly"}"#)
    let id = try #require(bought["transactions"]?[0]?["transaction_id"]?.string)
    let token = try #require(
      try await sim.ok("GET", "\(app)/users/old/transaction-receipt?transaction_id=\(id)")["receipt"]?.string)
    var verify = try await sim.verify(token)
    #expect(verify["status"]?.int64 == 0)
    #expect(verify["receipt"]?["transaction_id"]?.string == id)
    #expect(verify["receipt"]?["bid"]?.string == "com.example.app")
    #expect(verify["receipt"]?["expires_date"]?.string == "1769904000000")
    #expect(verify["receipt"]?["expires_date_formatted"]?.string == "2026-02-01 00:00:00 Etc/GMT")
    #expect(verify["latest_receipt_info"]?["transaction_id"]?.string == id)
    try await sim.ok("POST", "\(app)/users/old/cancel-auto-renew", #"{"group_id":"pro"}"#)
    try await sim.advance(#"{"days":40}"#)
    verify = try await sim.verify(token)
    #expect(verify["status"]?.int64 == 21006)
    #expect(verify["receipt"]?["transaction_id"]?.string == id)
    #expect(verify["latest_expired_receipt_info"]?["transaction_id"]?.string == id)
    #expect(try await sim.verify(token, password: "nope")["status"]?.int64 == 21004)
    try await sim.fails(404, "GET", "\(app)/users/old/transaction-receipt?transaction_id=999")
    try await sim.fails(400, "GET", "\(app)/users/old/transaction-receipt")
    await sim.stop()
  }

  @Test func excludeOldTransactionsKeepsTheNewestPerSubscription() async throws {
    let sim = try Sim()
    let (_, production) = try await subscribedUsers(sim)
    try await sim.advance(#"{"days":95}"#)
    let all = try await sim.verify(production)
    #expect(all["latest_receipt_info"]?.arrayValue?.count == 4)
    let newest = try await sim.verify(production, excludeOld: true)
    #expect(newest["latest_receipt_info"]?.arrayValue?.count == 1)
    #expect(newest["latest_receipt_info"]?[0]?["transaction_id"] == all["latest_receipt_info"]?[0]?["transaction_id"])
    // latest_receipt is a fresh receipt that itself verifies, with all four in `in_app`.
    let latest = try #require(all["latest_receipt"]?.string)
    #expect(try await sim.verify(latest)["receipt"]?["in_app"]?.arrayValue?.count == 4)
    await sim.stop()
  }

  @Test func injectedFaults() async throws {
    let sim = try Sim()
    let (sandbox, production) = try await subscribedUsers(sim)
    try await sim.ok("POST", "/control/faults", #"{"status":21005,"count":1}"#)
    #expect(try await sim.verify(production)["status"]?.int64 == 21005)
    #expect(try await sim.verify(production)["status"]?.int64 == 0)

    try await sim.ok("POST", "/control/faults", #"{"http_status":503,"count":1,"environment":"production"}"#)
    let (status, body) = try await call(
      "POST", sim.base, "/production/verifyReceipt", #"{"receipt-data":"\#(production)","password":"s3cret"}"#)
    #expect(status == 503)
    #expect(body["error"]?["status"]?.int64 == 503)

    try await sim.ok("POST", "/control/faults", #"{"status":21104,"count":1}"#)
    let retryable = try await sim.verify(production)
    #expect(retryable["status"]?.int64 == 21104)
    #expect(retryable["is-retryable"]?.boolValue == true)
    try await sim.ok("POST", "/control/faults", #"{"status":21199,"count":1,"retryable_key":"is_retryable","is_retryable":false}"#)
    let final = try await sim.verify(production)
    #expect(final["is_retryable"]?.boolValue == false)
    #expect(final["is-retryable"] == nil)

    // Latency only on the sandbox endpoint, until cleared.
    try await sim.ok("POST", "/control/faults", #"{"latency_ms":2000,"environment":"sandbox"}"#)
    let clock = ContinuousClock()
    var start = clock.now
    #expect(try await sim.verify(production)["status"]?.int64 == 0)
    #expect(clock.now - start < .milliseconds(2000))
    start = clock.now
    #expect(try await sim.verify(sandbox, environment: "sandbox")["status"]?.int64 == 0)
    #expect(clock.now - start >= .milliseconds(2000))
    #expect(try await sim.ok("GET", "/control/faults")["faults"]?.arrayValue?.count == 1)
    try await sim.ok("DELETE", "/control/faults")
    start = clock.now
    _ = try await sim.verify(sandbox, environment: "sandbox")
    #expect(clock.now - start < .milliseconds(2000))

    try await sim.fails(400, "POST", "/control/faults", #"{"status":500}"#)
    try await sim.fails(400, "POST", "/control/faults", #"{"http_status":200}"#)
    try await sim.fails(400, "POST", "/control/faults", #"{"count":0,"status":21005}"#)
    await sim.stop()
  }

  @Test(arguments: [
    ("POST", "/control/apps", #"{"bundle_id":"x y","shared_secret":"s"}"#, 400),
    ("POST", "/control/apps", #"{"bundle_id":"com.example.app"}"#, 400),
    ("POST", "/control/apps", #"{"bundle_id":"b","shared_secret":"s","grace_period_days":7}"#, 400),
    ("POST", "/control/apps", #"{"bundle_id":"b","shared_secret":"s","products":[{"product_id":"p","type":"auto_renewable"}]}"#, 400),
    ("POST", "/control/apps", #"{"bundle_id":"b","shared_secret":"s","notification_version":"v3"}"#, 400),
    ("POST", "/control/apps", "{not json", 400),
    ("POST", "/control/users", #"{"environment":"staging"}"#, 400),
    ("POST", "/control/apps/com.example.app/users/nobody/purchase", #"{"product_id":"pro.monthly"}"#, 404),
    ("POST", "/control/apps/nope/users/sb/purchase", #"{"product_id":"pro.monthly"}"#, 404),
    ("POST", "/control/apps/com.example.app/users/sb/purchase", #"{}"#, 400),
    ("POST", "/control/apps/com.example.app/users/sb/purchase", #"{"product_id":"pro.monthly"}"#, 409),
    ("POST", "/control/clock/advance", #"{"ms":-5}"#, 400),
    ("POST", "/control/clock/set", #"{"now_ms":0}"#, 400),
    ("GET", "/control/nothing", nil, 404),
    ("DELETE", "/control/clock", nil, 405),
  ] as [(String, String, String?, Int)])
  func controlErrorsArePrecise(method: String, path: String, body: String?, status: Int) async throws {
    let sim = try Sim()
    _ = try await subscribedUsers(sim)
    let message = try await sim.fails(status, method, path, body)
    #expect(!message.isEmpty)
    await sim.stop()
  }
}

@Suite("State snapshots")
struct SnapshotTests {
  @Test func aRestoredSimulatorContinuesExactlyWhereTheFirstStood() async throws {
    let first = try Sim()
    try await first.ok("POST", "/control/apps", catalog(graceDays: 3))
    try await first.ok("POST", "/control/users", #"{"user_id":"a","environment":"production"}"#)
    try await first.ok("POST", "/control/users", #"{"user_id":"b","environment":"production"}"#)
    try await first.ok("POST", "/control/users/a/family/members", #"{"user_id":"b"}"#)
    let bought = try await first.ok(
      "POST", "\(app)/users/a/purchase", #"{"product_id":"pro.monthly","offer":{"type":"introductory"}}"#)
    try await first.ok("POST", "/control/users/a/billing-failure")
    try await first.advance(#"{"days":8}"#)
    let receipt = try #require(bought["receipt"]?.string)

    let (status, snapshot) = try await call("GET", first.base, "/control/state")
    #expect(status == 200)
    let second = try Sim(.init(startMs: 0))
    try await second.ok("PUT", "/control/state", snapshot.serialized())
    #expect(try await second.ok("GET", "/control/clock")["now_ms"] == (try await first.ok("GET", "/control/clock"))["now_ms"])
    #expect(try await second.verify(receipt).serialized() == (try await first.verify(receipt)).serialized())
    // Both continue identically: same ids, same renewals.
    let next1 = try await first.ok("POST", "/control/users/a/billing-recover")
    let next2 = try await second.ok("POST", "/control/users/a/billing-recover")
    #expect(next1["transactions"]?.arrayValue?.count == 2)
    #expect(next1["transactions"] == next2["transactions"])
    let user1 = try await first.ok("POST", "/control/users", #"{}"#)
    let user2 = try await second.ok("POST", "/control/users", #"{}"#)
    #expect(user1["user_id"] == user2["user_id"])

    try await second.fails(400, "PUT", "/control/state", #"{"version":99}"#)
    try await second.fails(400, "PUT", "/control/state", "[]")
    await first.stop()
    await second.stop()
  }
}

@Suite("Notification delivery")
struct NotificationDeliveryTests {
  @Test func retriesFollowAppleV1ScheduleCompressed() async throws {
    let receiver = try startReceiver(script: [500, 503])
    let sim = try Sim()
    // Compression 3600: Apple's 6 h / 24 h / 48 h become 6 s / 24 s / 48 s of simulated time.
    try await sim.ok("POST", "/control/apps", catalog(notificationURL: receiver.url, compression: 3600))
    try await sim.ok("POST", "/control/users", #"{"user_id":"p","environment":"production"}"#)
    try await sim.ok("POST", "\(app)/users/p/purchase", #"{"product_id":"pro.monthly"}"#)
    try await sim.drain()
    var deliveries = try await sim.notifications()
    #expect(deliveries.count == 1)
    #expect(deliveries[0]["attempts"]?.arrayValue?.count == 1)
    #expect(deliveries[0]["attempts"]?[0]?["http_status"]?.int64 == 500)
    #expect(deliveries[0]["next_attempt_ms"]?.int64 == startMs + 6_000)

    try await sim.advance(#"{"seconds":5}"#)
    try await sim.drain()
    #expect(receiver.bodies.count == 1)
    try await sim.advance(#"{"seconds":1}"#)
    try await sim.drain()
    #expect(receiver.bodies.count == 2)
    deliveries = try await sim.notifications()
    #expect(deliveries[0]["next_attempt_ms"]?.int64 == startMs + 6_000 + 24_000)
    try await sim.advance(#"{"seconds":24}"#)
    try await sim.drain()
    deliveries = try await sim.notifications(user: "p")
    #expect(deliveries[0]["state"]?.string == "delivered")
    #expect(deliveries[0]["attempts"]?.arrayValue?.compactMap { $0["http_status"]?.int64 } == [500, 503, 200])
    // Every attempt carries the same body.
    #expect(Set(receiver.bodies.map { $0.serialized() }).count == 1)
    #expect(receiver.types == ["INITIAL_BUY", "INITIAL_BUY", "INITIAL_BUY"])
    await sim.stop()
    await receiver.stop()
  }

  @Test func givesUpAfterThreeRetriesAndSandboxTriesOnce() async throws {
    let receiver = try startReceiver(script: Array(repeating: 500, count: 20))
    let sim = try Sim()
    try await sim.ok("POST", "/control/apps", catalog(notificationURL: receiver.url, compression: 3600))
    try await sim.ok("POST", "/control/users", #"{"user_id":"p","environment":"production"}"#)
    try await sim.ok("POST", "/control/users", #"{"user_id":"s","environment":"sandbox"}"#)
    try await sim.ok("POST", "\(app)/users/p/purchase", #"{"product_id":"pro.monthly"}"#)
    try await sim.ok("POST", "\(app)/users/s/purchase", #"{"product_id":"lifetime"}"#)
    try await sim.ok("POST", "\(app)/users/s/purchase", #"{"product_id":"pro.monthly"}"#)
    for seconds in [6, 24, 48, 100] {
      try await sim.drain()
      try await sim.advance(#"{"seconds":\#(seconds)}"#)
    }
    try await sim.drain()
    let production = try await sim.notifications(user: "p")
    #expect(production.count == 1)
    #expect(production[0]["state"]?.string == "failed")
    #expect(production[0]["attempts"]?.arrayValue?.count == 4)
    let sandbox = try await sim.notifications(user: "s")
    #expect(sandbox.count == 1)
    #expect(sandbox[0]["attempts"]?.arrayValue?.count == 1)
    #expect(sandbox[0]["state"]?.string == "failed")
    await sim.stop()
    await receiver.stop()
  }

  @Test func unreachableReceiverCountsAsFailure() async throws {
    // A port that is bound but not listening refuses connections, and no other test can take
    // it while we hold it (a stopped server's port could be reused by a concurrent test).
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0
      }
    }
    try #require(bound)
    let url = "http://127.0.0.1:\(UInt16(bigEndian: address.sin_port))/notifications"
    let sim = try Sim(.init(startMs: startMs, defaultNotificationURL: url, notificationTimeoutSeconds: 5))
    try await sim.ok("POST", "/control/apps", catalog())
    try await sim.ok("POST", "/control/users", #"{"user_id":"p","environment":"production"}"#)
    try await sim.ok("POST", "\(app)/users/p/purchase", #"{"product_id":"pro.monthly"}"#)
    try await sim.drain()
    let deliveries = try await sim.notifications()
    #expect(deliveries.count == 1)
    #expect(deliveries[0]["url"]?.string == url)
    #expect(deliveries[0]["attempts"]?[0]?["http_status"]?.isNull == true)
    #expect(deliveries[0]["attempts"]?[0]?["error"]?.string?.isEmpty == false)
    #expect(deliveries[0]["state"]?.string == "pending")
    await sim.stop()
  }

  @Test func flowingClockRenewsOnItsOwn() async throws {
    let receiver = try startReceiver()
    // 3,000× real time: a sandbox month (5 minutes) passes in 100 ms.
    let sim = try Sim(.init(startMs: startMs, timeScale: 3000, defaultNotificationURL: receiver.url))
    try await sim.ok("POST", "/control/apps", catalog())
    try await sim.ok("POST", "/control/users", #"{"user_id":"s","environment":"sandbox"}"#)
    try await sim.ok("POST", "\(app)/users/s/purchase", #"{"product_id":"pro.monthly"}"#)
    _ = await waitUntil(every: .milliseconds(50)) { receiver.types.filter({ $0 == "DID_RENEW" }).count >= 2 }
    #expect(receiver.types.filter { $0 == "DID_RENEW" }.count >= 2)
    await sim.stop()
    await receiver.stop()
  }
}

@Suite("Apple time formats")
struct AppleTimeTests {
  @Test(arguments: [
    (Int64(1_767_225_600_000), "2026-01-01 00:00:00 Etc/GMT", "2025-12-31 16:00:00 America/Los_Angeles"),
    (1_773_482_399_000, "2026-03-14 09:59:59 Etc/GMT", "2026-03-14 02:59:59 America/Los_Angeles"),
    (1_772_963_999_000, "2026-03-08 09:59:59 Etc/GMT", "2026-03-08 01:59:59 America/Los_Angeles"),
    (1_793_523_599_000, "2026-11-01 08:59:59 Etc/GMT", "2026-11-01 01:59:59 America/Los_Angeles"),
    (1_773_568_800_000, "2026-03-15 10:00:00 Etc/GMT", "2026-03-15 03:00:00 America/Los_Angeles"),
    (1_772_964_000_000, "2026-03-08 10:00:00 Etc/GMT", "2026-03-08 03:00:00 America/Los_Angeles"),
    (1_793_523_600_000, "2026-11-01 09:00:00 Etc/GMT", "2026-11-01 01:00:00 America/Los_Angeles"),
    (1_709_251_199_999, "2024-02-29 23:59:59 Etc/GMT", "2024-02-29 15:59:59 America/Los_Angeles"),
  ])
  func datesInAppleForms(ms: Int64, gmt: String, pst: String) {
    #expect(AppleTime.gmt(ms) == gmt)
    #expect(AppleTime.pst(ms) == pst)
  }

  @Test(arguments: [
    ("P1M", Int64(1_769_817_600_000), Int64(1_772_236_800_000)),  // Jan 31 → Feb 28
    ("P1M", 1_706_659_200_000, 1_709_164_800_000),  // 2024-01-31 → 2024-02-29
    ("P1Y", 1_709_164_800_000, 1_740_700_800_000),  // 2024-02-29 → 2025-02-28
    ("P3M", 1_767_225_600_000, 1_775_001_600_000),
    ("P1W", 1_767_225_600_000, 1_767_830_400_000),
    ("P3D", 1_767_225_600_000, 1_767_484_800_000),
  ])
  func calendarArithmetic(duration: String, start: Int64, end: Int64) throws {
    let parsed = try #require(SubscriptionDuration(iso: duration))
    #expect(parsed.end(from: start) == end)
  }

  @Test(arguments: [
    ("P3D", 2), ("P1W", 3), ("P1M", 5), ("P2M", 10), ("P3M", 15), ("P6M", 30), ("P1Y", 60),
  ])
  func sandboxCompression(duration: String, minutes: Int64) throws {
    #expect(try #require(SubscriptionDuration(iso: duration)).sandboxMs == minutes * 60_000)
  }

  @Test(arguments: ["", "P", "1M", "P0M", "PXM", "P1H", "P1M2D"])
  func rejectsOtherDurations(text: String) {
    #expect(SubscriptionDuration(iso: text) == nil)
  }

  @Test func receiptTokensRoundTrip() throws {
    let token = ReceiptToken(
      environment: .sandbox, snapshotSeq: 7, issuedMs: 42, bundleID: "com.a.b", userID: "u-1")
    #expect(ReceiptToken(decoding: token.encoded) == token)
    var transaction = token
    transaction.transactionID = "2000000000000009"
    #expect(ReceiptToken(decoding: transaction.encoded) == transaction)
    #expect(ReceiptToken(decoding: Data("asim1t:sandbox:1:2:b:u".utf8).base64EncodedString()) == nil)
    #expect(ReceiptToken(decoding: "") == nil)
  }
}

@Suite("appstore-sim command line")
struct CommandLineTests {
  @Test func parsesOptions() throws {
    let options = try SimulatorCommandLine(arguments: [
      "--listen", "127.0.0.1:0", "--ready-file", "/tmp/r", "--notify-url-default", "http://h:1/n",
      "--time-scale", "0", "--start-ms", "5", "--notification-retry-compression", "60",
    ])
    #expect(options.listen == "127.0.0.1:0")
    #expect(options.readyFile == "/tmp/r")
    #expect(options.configuration.defaultNotificationURL == "http://h:1/n")
    #expect(options.configuration.timeScale == 0)
    #expect(options.configuration.startMs == 5)
    #expect(options.configuration.notificationRetryCompression == 60)
  }

  @Test(arguments: [
    ["--listen"], ["--listen", "nope"], ["--time-scale", "-1"], ["--bogus"],
    ["--notify-url-default", "ftp://x"], ["--notification-retry-compression", "0.5"],
  ])
  func rejectsBadOptions(arguments: [String]) {
    #expect(throws: HTTPServerError.self) { try SimulatorCommandLine(arguments: arguments) }
  }

  @Test func binaryWritesReadyFileServesAndStopsOnSIGTERM() async throws {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
      .deletingLastPathComponent()
    let binary = root.appendingPathComponent(".build/debug/appstore-sim")
    try #require(FileManager.default.isExecutableFile(atPath: binary.path), "build appstore-sim first")
    let ready = FileManager.default.temporaryDirectory.appendingPathComponent("appstore-sim-\(UUID()).json")
    defer { try? FileManager.default.removeItem(at: ready) }
    // Killed if the test drops it running.
    let child = try ChildProcess(binary.path, ["--listen", "127.0.0.1:0", "--ready-file", ready.path, "--time-scale", "0"])
    let address = try #require(try await child.readyFile(ready, timeout: .seconds(10))["http"])
    #expect(address.hasPrefix("127.0.0.1:"))
    let (status, _) = try await call("GET", address, "/healthz")
    #expect(status == 200)
    #expect(await child.stop() == .init(status: 0, signaled: false))  // SIGTERM
  }

  @Test func stateFileSurvivesARestart() async throws {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
      .deletingLastPathComponent()
    let binary = root.appendingPathComponent(".build/debug/appstore-sim")
    try #require(FileManager.default.isExecutableFile(atPath: binary.path), "build appstore-sim first")
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("appstore-sim-\(UUID())")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let stateFile = directory.appendingPathComponent("state.json").path

    func start() async throws -> (ChildProcess, String) {
      let ready = directory.appendingPathComponent("ready-\(UUID()).json")
      let child = try ChildProcess(
        binary.path,
        [
          "--listen", "127.0.0.1:0", "--ready-file", ready.path, "--time-scale", "0",
          "--start-ms", String(startMs), "--state-file", stateFile,
        ])
      return (child, try #require(try await child.readyFile(ready, timeout: .seconds(10))["http"]))
    }

    var (process, address) = try await start()
    _ = try await call("POST", address, "/control/apps", catalog())
    _ = try await call("POST", address, "/control/users", #"{"user_id":"keep","environment":"production"}"#)
    let (_, bought) = try await call("POST", address, "\(app)/users/keep/purchase", #"{"product_id":"pro.monthly"}"#)
    let receipt = try #require(bought["receipt"]?.string)
    #expect(await process.stop() == .init(status: 0, signaled: false))
    #expect(FileManager.default.fileExists(atPath: stateFile))

    (process, address) = try await start()
    let (_, verify) = try await call(
      "POST", address, "/production/verifyReceipt", #"{"receipt-data":"\#(receipt)","password":"s3cret"}"#)
    #expect(verify["status"]?.int64 == 0)
    #expect(verify["latest_receipt_info"]?.arrayValue?.count == 1)
    await process.stop()
  }
}
