import Foundation
import SubstatusProcessTestKit
import SubscriptionDomain
import SubscriptionStorage
import Testing

@testable import SubscriptionStorageSQLite

#if canImport(Glibc)
  import Glibc
#endif

/// Finds an executable product built next to the test bundle (or in the package's .build/debug).
func builtExecutable(_ name: String, filePath: String = #filePath) -> String? {
  var candidates: [String] = []
  let testBinary = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
  var dir = testBinary.deletingLastPathComponent()
  for _ in 0..<4 {
    candidates.append(dir.appendingPathComponent(name).path)
    dir = dir.deletingLastPathComponent()
  }
  let root = URL(fileURLWithPath: filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()
  candidates.append(root.appendingPathComponent(".build/debug/\(name)").path)
  return candidates.first { FileManager.default.isExecutableFile(atPath: $0) }
}

@Suite("Crash durability")
struct CrashDurabilityTests {
  /// The event types a new transaction causes (one per transaction).
  static let purchaseTypes: Set<SubscriptionEventType> = [
    .subscriptionStarted, .trialConverted, .renewed, .productChanged, .resubscribed,
    .billingRecovered, .nonRenewingPurchased, .oneTimePurchased,
  ]

  /// Kills a writer process with SIGKILL at random moments, at least 20 times, and checks after each
  /// kill that every acknowledged transaction is in the database with its event logged exactly once,
  /// and the database is intact.
  @Test("SIGKILL at random moments loses no acknowledged write or its events (20 kills)", .timeLimit(.minutes(2)))
  func sigkill() async throws {
    let executable = try #require(
      builtExecutable("substatus-storage-crashtest"),
      "build substatus-storage-crashtest first (swift build --build-tests)")
    let dir = TemporaryDirectory()
    let db = dir.file("crash.sqlite")
    let acked = dir.file("acked.txt")
    var generator = SystemRandomNumberGenerator()
    var totalAcked = 0
    let started = Date()
    for run in 0..<20 {
      let child = try ChildProcess(executable, ["--db", db, "--acked", acked, "--run", String(run)])
      // Wait until it is ingesting ("ready"), then let it run a random while (the kill's point in
      // time is what is tested) and kill it.
      let ready = try await child.firstLine()
      #expect(ready.hasPrefix("ready"), "run \(run) did not start")
      let delayMs = Int.random(in: 0...800, using: &generator)
      try await Task.sleep(for: .milliseconds(delayMs))
      let exit = await child.stop(signal: SIGKILL)
      #expect(exit.signaled, "run \(run) exited by itself")

      let text = (try? String(contentsOfFile: acked, encoding: .utf8)) ?? ""
      var lines = text.split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
      if !text.isEmpty && !text.hasSuffix("\n") { lines.removeLast() }  // a torn last line
      let store = try SQLiteStore(configuration: .init(path: db, readerCount: 1))
      let stored = try await store.readers.read { db throws(StoreError) in
        Set(try db.all("SELECT transaction_id FROM transactions") { $0.text(0) })
      }
      let events = try await store.readers.read { db throws(StoreError) in
        try db.all("SELECT payload FROM events") { r throws(StoreError) in try PayloadCodec.decodeEvent(r.blob(0)) }
      }
      var purchaseEvents: [String: Int] = [:]
      for e in events where Self.purchaseTypes.contains(e.type) {
        purchaseEvents[e.transactionId ?? "", default: 0] += 1
      }
      let integrity = try await store.integrityCheck()
      store.close()
      #expect(integrity == ["ok"], "integrity after run \(run)")
      let missing = lines.filter { !stored.contains($0) }
      #expect(
        missing.isEmpty,
        "run \(run): \(missing.count) acknowledged ids missing, e.g. \(missing.prefix(3))")
      // Every stored transaction (acknowledged or committed just before the kill) has its purchase
      // event, exactly once: the events are in the same commit as the data.
      let unlogged = stored.filter { purchaseEvents[$0] != 1 }
      #expect(
        unlogged.isEmpty,
        "run \(run): \(unlogged.count) transactions without exactly one purchase event, e.g. \(unlogged.prefix(3).map { ($0, purchaseEvents[$0] ?? 0) })")
      #expect(purchaseEvents.values.reduce(0, +) == stored.count, "run \(run): purchase events of unknown transactions")
      #expect(lines.count >= totalAcked)
      totalAcked = lines.count
    }
    #expect(totalAcked > 0)
    print(
      "crash test: 20 kills, \(totalAcked) acknowledged transactions and their events verified in \(Int(Date().timeIntervalSince(started))) s"
    )
  }
}
