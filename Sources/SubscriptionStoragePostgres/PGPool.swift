// The connection pool: a few threads, each owning one libpq connection. libpq calls block, so they
// never run on the caller's thread (an event loop or the cooperative pool): a caller enqueues a job
// and awaits a continuation that the pool thread resumes.
import Dispatch
import Foundation
import Glibc
import SubscriptionStorage
import Synchronization

/// A multi-producer job queue drained by the pool threads.
final class PGJobQueue: Sendable {
  typealias Job = @Sendable (PGConnection?) -> Void
  private struct State {
    var jobs: [Job] = []
    var head = 0
    var closed = false
  }
  private let state = Mutex(State())
  private let signal = DispatchSemaphore(value: 0)

  /// Adds a job; `false` if the queue is closed.
  func push(_ job: @escaping Job) -> Bool {
    let accepted = state.withLock { s -> Bool in
      if s.closed { return false }
      s.jobs.append(job)
      return true
    }
    if accepted { signal.signal() }
    return accepted
  }

  /// Waits for the next job; `nil` once closed and drained.
  func take() -> Job? {
    while true {
      signal.wait()
      let (job, closed) = state.withLock { s -> (Job?, Bool) in
        guard s.head < s.jobs.count else { return (nil, s.closed) }
        let job = s.jobs[s.head]
        s.head += 1
        if s.head == s.jobs.count {
          s.jobs.removeAll(keepingCapacity: true)
          s.head = 0
        }
        return (job, s.closed)
      }
      if let job { return job }
      if closed {
        signal.signal()  // wake the next thread so it sees the close too
        return nil
      }
    }
  }

  /// Refuses further jobs and wakes the threads; queued jobs are still handed out.
  func close() {
    state.withLock { $0.closed = true }
    signal.signal()
  }
}

/// The pool threads and their connections.
final class PGPool: Sendable {
  private let queue = PGJobQueue()
  private let finished = DispatchSemaphore(value: 0)
  private let count: Int
  /// How often a transaction that lost a deadlock or a serialization conflict is run again.
  static let maxAttempts = 5

  /// Starts one thread per connection.
  init(connections: [PGConnection], conninfo: String) {
    count = connections.count
    for (i, connection) in connections.enumerated() {
      let queue = self.queue
      let finished = self.finished
      let thread = Thread {
        Self.nameCurrentThread("pg-pool-\(i)")
        var connection: PGConnection? = connection
        while let job = queue.take() {
          // A lost session (server restart, failover) is re-established before the next job.
          if let c = connection, c.isBroken { try? c.reconnect() }
          if connection == nil { connection = try? PGConnection(conninfo: conninfo) }
          job(connection)
        }
        connection = nil
        finished.signal()
      }
      thread.start()
    }
  }

  private static func nameCurrentThread(_ name: String) {
    let fd = open("/proc/thread-self/comm", O_WRONLY)
    guard fd >= 0 else { return }
    defer { _ = Glibc.close(fd) }
    let bytes = Array(name.utf8.prefix(15))
    _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
  }

  /// Runs `body` on a pool connection (autocommit: each statement is its own transaction).
  func run<T: Sendable>(
    _ body: @escaping @Sendable (PGConnection) throws(StoreError) -> T
  ) async throws(StoreError) -> T {
    let result: Result<T, StoreError> = await withCheckedContinuation { continuation in
      let accepted = queue.push { connection in
        guard let connection, !connection.isBroken else {
          continuation.resume(
            returning: .failure(StoreError(.unavailable, "no connection to PostgreSQL")))
          return
        }
        do throws(StoreError) {
          continuation.resume(returning: .success(try body(connection)))
        } catch {
          continuation.resume(returning: .failure(error))
        }
      }
      if !accepted {
        continuation.resume(returning: .failure(StoreError(.unavailable, "the store is closed")))
      }
    }
    return try result.get()
  }

  /// Runs `body` in one READ COMMITTED transaction and returns once it is committed. A transaction
  /// that lost a deadlock (40P01) or a serialization conflict (40001) is rolled back and run again.
  /// - Throws: the body's error (its changes are rolled back) or the commit's.
  func transaction<T: Sendable>(
    _ body: @escaping @Sendable (PGConnection) throws(StoreError) -> T
  ) async throws(StoreError) -> T {
    try await run { db throws(StoreError) in
      var attempt = 0
      while true {
        attempt += 1
        do throws(StoreError) {
          try db.execute("BEGIN")
          let value = try body(db)
          try db.execute("COMMIT")
          return value
        } catch {
          let state = db.lastSQLState
          if db.inTransaction, !db.isBroken { try? db.execute("ROLLBACK") }
          if (state == "40P01" || state == "40001"), attempt < Self.maxAttempts {
            usleep(UInt32.random(in: 1_000...20_000) * UInt32(attempt))
            continue
          }
          throw error
        }
      }
    }
  }

  /// Refuses new jobs, lets queued ones finish and waits for the threads to end.
  func close(wait: Bool = true) {
    queue.close()
    if wait { for _ in 0..<count { finished.wait() } }
  }
}
