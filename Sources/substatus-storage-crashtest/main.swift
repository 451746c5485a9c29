// substatus-storage-crashtest: ingests transactions into a SQLite store as fast as it can and, after
// each acknowledged ingest, appends the acknowledged transaction ids to a side file. The crash test
// (Tests/SubscriptionStorageTests/CrashDurabilityTests.swift) kills it with SIGKILL at random moments
// and checks that every id in the side file is in the database, with the event it caused logged
// exactly once (events are derived and appended in the ingest's commit).
//
// Usage: substatus-storage-crashtest --db PATH --acked PATH --run N [--writers N] [--batch N]
import Foundation
import SubscriptionDomain
import SubscriptionStorage
import SubscriptionStorageSQLite

#if canImport(Glibc)
  import Glibc
#endif

func argument(_ name: String) -> String? {
  let args = CommandLine.arguments
  guard let i = args.firstIndex(of: name), i + 1 < args.count else { return nil }
  return args[i + 1]
}

func fail(_ message: String) -> Never {
  FileHandle.standardError.write(Data("substatus-storage-crashtest: \(message)\n".utf8))
  exit(2)
}

guard let dbPath = argument("--db"), let ackedPath = argument("--acked"),
  let run = argument("--run")
else {
  fail("usage: --db PATH --acked PATH --run N [--writers N] [--batch N]")
}
let writers = Int(argument("--writers") ?? "") ?? 4
let batchSize = Int(argument("--batch") ?? "") ?? 10

let ackedFD = open(ackedPath, O_WRONLY | O_CREAT | O_APPEND, 0o644)
if ackedFD < 0 { fail("cannot open \(ackedPath)") }

let store: SQLiteStore
do {
  store = try SQLiteStore(configuration: .init(path: dbPath, readerCount: 1))
} catch {
  fail("cannot open the store: \(error)")
}

do {
  try await store.createTenant(TenantRecord(tenantId: "t1", name: "crash", createdMs: 0))
  try await store.createApp(
    AppRecord(appId: "a1", tenantId: "t1", bundleId: "com.example.crash", createdMs: 0))
} catch  where error.code == .alreadyExists {
  // A previous run created them.
} catch {
  fail("seeding failed: \(error)")
}

/// Appends lines with one write(2) on an O_APPEND descriptor: a kill leaves at most a torn last line.
func appendAcked(_ ids: [String]) {
  let text = ids.joined(separator: "\n") + "\n"
  var bytes = Array(text.utf8)
  var offset = 0
  while offset < bytes.count {
    let n = bytes.withUnsafeMutableBytes {
      write(ackedFD, $0.baseAddress! + offset, $0.count - offset)
    }
    if n <= 0 { fail("cannot write \(ackedPath)") }
    offset += n
  }
}

FileHandle.standardOutput.write(Data("ready\n".utf8))

await withTaskGroup(of: Void.self) { group in
  for w in 0..<writers {
    group.addTask {
      var counter = 0
      while true {
        var transactions: [Transaction] = []
        for _ in 0..<batchSize {
          counter += 1
          let id = "r\(run)-w\(w)-\(counter)"
          transactions.append(
            Transaction(
              transactionId: id, originalTransactionId: "r\(run)-w\(w)-1", productId: "monthly",
              subscriptionGroupIdentifier: "g1", purchaseDate: Int64(counter) * 1000,
              expiresDate: Int64(counter) * 1000 + 500, environment: .production))
        }
        let user = UserKey(appId: "a1", environment: .production, userId: "u\(w)-\(counter % 97)")
        do {
          _ = try await store.ingest([UserPurchases(user: user, transactions: transactions)], atMs: Int64(Date().timeIntervalSince1970 * 1000))
        } catch {
          fail("ingest failed: \(error)")
        }
        appendAcked(transactions.map(\.transactionId))
      }
    }
  }
}
