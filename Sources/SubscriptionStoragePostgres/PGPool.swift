// The connection pool: a few threads, each owning one libpq connection. libpq calls block, so they
// never run on the caller's thread (an event loop or the cooperative pool): a caller enqueues a job
// and awaits a continuation that the pool thread resumes.
import Dispatch
import Foundation
import Glibc
import SubscriptionStorage
import Synchronization

/// A multi-producer job queue drained by the pool threads, in two lanes: single statements
/// (`PGPool.run`: reads and small autocommit writes) and transactions (`PGPool.transaction`). The
/// general threads take the oldest job of either lane; one thread may be reserved for statements,
/// so that reads never wait behind a queue of transactions (as SQLite's readers never wait for its
/// writer).
final class PGJobQueue: Sendable {
  typealias Job = @Sendable (PGConnection?) -> Void
  /// Which lane a job goes to.
  enum Kind { case statement, transaction }
  private struct Lane {
    var jobs: [(seq: Int, job: Job)] = []
    var head = 0
    var first: Int? { head < jobs.count ? jobs[head].seq : nil }
    mutating func pop() -> Job? {
      guard head < jobs.count else { return nil }
      let job = jobs[head].job
      head += 1
      if head == jobs.count {
        jobs.removeAll(keepingCapacity: true)
        head = 0
      }
      return job
    }
  }
  private struct State {
    var statements = Lane()
    var transactions = Lane()
    var seq = 0
    var closed = false
  }
  private let state = Mutex(State())
  /// Signalled once per job (general threads); a thread may wake and find the job taken by the
  /// reserved thread, and waits again.
  private let anyJob = DispatchSemaphore(value: 0)
  /// Signalled once per statement (the reserved thread); likewise it may find it taken.
  private let statementJob = DispatchSemaphore(value: 0)

  /// Adds a job; `false` if the queue is closed.
  func push(_ kind: Kind, _ job: @escaping Job) -> Bool {
    let accepted = state.withLock { s -> Bool in
      if s.closed { return false }
      s.seq += 1
      switch kind {
      case .statement: s.statements.jobs.append((s.seq, job))
      case .transaction: s.transactions.jobs.append((s.seq, job))
      }
      return true
    }
    if accepted {
      anyJob.signal()
      if kind == .statement { statementJob.signal() }
    }
    return accepted
  }

  /// Waits for the next job (only statements when `statementsOnly`); `nil` once closed and
  /// drained.
  func take(statementsOnly: Bool = false) -> Job? {
    let signal = statementsOnly ? statementJob : anyJob
    while true {
      signal.wait()
      let (job, closed) = state.withLock { s -> (Job?, Bool) in
        if statementsOnly { return (s.statements.pop(), s.closed) }
        switch (s.statements.first, s.transactions.first) {
        case (let a?, let b?): return (a < b ? s.statements.pop() : s.transactions.pop(), s.closed)
        case (.some, nil): return (s.statements.pop(), s.closed)
        case (nil, .some): return (s.transactions.pop(), s.closed)
        case (nil, nil): return (nil, s.closed)
        }
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
    anyJob.signal()
    statementJob.signal()
  }
}

/// The pool threads and their connections.
final class PGPool: Sendable {
  private let queue = PGJobQueue()
  private let finished = DispatchSemaphore(value: 0)
  private let count: Int
  /// How often a transaction that lost a deadlock or a serialization conflict is run again.
  static let maxAttempts = 5

  /// Starts one thread per connection. With two connections or more, the first one serves only
  /// single statements (``run(_:)``): reads never wait for a free connection behind queued
  /// transactions.
  init(connections: [PGConnection], conninfo: String) {
    count = connections.count
    for (i, connection) in connections.enumerated() {
      let queue = self.queue
      let finished = self.finished
      let statementsOnly = i == 0 && connections.count > 1
      let thread = Thread {
        Self.nameCurrentThread("pg-pool-\(i)")
        var connection: PGConnection? = connection
        while let job = queue.take(statementsOnly: statementsOnly) {
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

  /// Runs `body` on a pool connection (autocommit: each statement is its own transaction). Meant
  /// for one statement: it may run on the connection reserved for statements.
  func run<T: Sendable>(
    _ body: @escaping @Sendable (PGConnection) throws(StoreError) -> T
  ) async throws(StoreError) -> T {
    try await enqueue(.statement, body)
  }

  private func enqueue<T: Sendable>(
    _ kind: PGJobQueue.Kind, _ body: @escaping @Sendable (PGConnection) throws(StoreError) -> T
  ) async throws(StoreError) -> T {
    let result: Result<T, StoreError> = await withCheckedContinuation { continuation in
      let accepted = queue.push(kind) { connection in
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
    try await enqueue(.transaction) { db throws(StoreError) in
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
