// The threads that own the connections: one writer doing group commit, a pool of readers. Callers
// enqueue a job and await a continuation that the worker resumes; only the short per-user reads of
// the hot path run on the caller's own thread (`SQLiteInlineReaders`).
import Dispatch
import Foundation
import SubscriptionStorage
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// Names the calling thread (visible in `top -H`, `ps -L`, debuggers; at most 15 characters).
/// Foundation's `Thread.name` does not reach the kernel on Linux, so this writes
/// `/proc/thread-self/comm`; on failure the thread just keeps its inherited name.
func nameCurrentThread(_ name: String) {
  let fd = open("/proc/thread-self/comm", O_WRONLY)
  guard fd >= 0 else { return }
  defer { close(fd) }
  let bytes = Array(name.utf8.prefix(15))
  _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
}

/// The calling thread's kernel name.
func currentThreadName() -> String {
  (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8))?
    .trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
}

/// A multi-producer job queue drained by worker threads.
final class JobQueue<Job: Sendable>: Sendable {
  private struct State {
    var jobs: [Job] = []
    var head = 0
    var closed = false
  }
  private let state = Mutex(State())
  private let signal = DispatchSemaphore(value: 0)

  /// Adds a job; `false` if the queue is closed.
  func push(_ job: Job) -> Bool {
    let accepted = state.withLock { s -> Bool in
      if s.closed { return false }
      s.jobs.append(job)
      return true
    }
    if accepted { signal.signal() }
    return accepted
  }

  /// Waits for jobs and takes up to `max` of them; an empty result means closed and drained.
  func take(max: Int) -> [Job] {
    while true {
      signal.wait()
      let (taken, closed) = state.withLock { s -> ([Job], Bool) in
        let available = s.jobs.count - s.head
        let n = Swift.min(available, max)
        let taken = Array(s.jobs[s.head..<(s.head + n)])
        s.head += n
        if s.head == s.jobs.count {
          s.jobs.removeAll(keepingCapacity: true)
          s.head = 0
        } else if s.head > 4096 {
          s.jobs.removeFirst(s.head)
          s.head = 0
        }
        return (taken, s.closed)
      }
      if !taken.isEmpty { return taken }
      if closed {
        signal.signal()  // wake the next worker so it sees the close too
        return []
      }
    }
  }

  /// Refuses further jobs and wakes the workers; queued jobs are still handed out.
  func close() {
    state.withLock { $0.closed = true }
    signal.signal()
  }
}

/// A write: runs inside the group transaction; `finish` is called once the commit's outcome is known.
struct WriteJob: Sendable {
  /// Runs the body on the writer's connection. Returns whether it failed (its savepoint is then rolled
  /// back) and a completion to call with the commit error (nil: durably committed).
  let execute: @Sendable (SQLiteConnection) -> (failed: Bool, finish: (StoreError?) -> Void)
  /// Reports `error` to the caller without running the body.
  let abandon: @Sendable (StoreError) -> Void
  /// Whether the caller needs the commit to survive a power loss (`false`: a process crash is
  /// enough; see ``SQLiteWriter/write(durable:_:)``).
  var durable = true
}

/// The single writer thread: takes every pending write, runs them in one transaction (each in its
/// own savepoint), commits once (one fsync for all of them) and only then acknowledges each caller.
final class SQLiteWriter: Sendable {
  private let queue = JobQueue<WriteJob>()
  private let finished = DispatchSemaphore(value: 0)
  /// The most writes grouped into one commit.
  static let maxGroup = 256
  private let counters: Counters

  /// Group-commit counters.
  final class Counters: Sendable {
    let commits = Atomic<Int>(0)
    let writes = Atomic<Int>(0)
  }

  /// - Parameter synchronous: the connection's `synchronous` setting (restored after a commit
  ///   of writes that needed no fsync).
  init(connection: SQLiteConnection, synchronous: String = "FULL") {
    let queue = self.queue
    let finished = self.finished
    let counters = Counters()
    self.counters = counters
    let thread = Thread {
      nameCurrentThread("sqlite-writer")
      SQLiteWriter.loop(connection: connection, queue: queue, counters: counters, synchronous: synchronous)
      connection.close()
      finished.signal()
    }
    thread.start()
  }

  /// Commits done so far and writes acknowledged by them (group commit efficiency).
  var statistics: (commits: Int, writes: Int) {
    (counters.commits.load(ordering: .relaxed), counters.writes.load(ordering: .relaxed))
  }

  private static func loop(
    connection: SQLiteConnection, queue: JobQueue<WriteJob>, counters: Counters, synchronous: String
  ) {
    while true {
      let jobs = queue.take(max: maxGroup)
      if jobs.isEmpty { return }
      // A group of writes none of which needs to survive a power loss commits without the fsync
      // (WAL, synchronous=NORMAL: still safe from a process crash, and the next fsynced commit
      // makes it durable too, in order). Set outside the transaction (SQLite refuses it inside),
      // with `execute`, not the statement cache (this pragma acts when it is prepared).
      let relaxed = synchronous == "FULL" && !jobs.contains(where: \.durable)
      if relaxed { try? connection.execute("PRAGMA synchronous=NORMAL") }
      do {
        try connection.run("BEGIN IMMEDIATE")
      } catch {
        if relaxed { try? connection.execute("PRAGMA synchronous=FULL") }
        for job in jobs { job.abandon(error) }
        continue
      }
      var finishers: [(StoreError?) -> Void] = []
      finishers.reserveCapacity(jobs.count)
      var poisoned: StoreError?
      for job in jobs {
        if let poisoned {
          job.abandon(poisoned)
          continue
        }
        do {
          try connection.run("SAVEPOINT job")
        } catch {
          poisoned = error
          job.abandon(error)
          continue
        }
        let (failed, finish) = job.execute(connection)
        finishers.append(finish)
        do {
          if failed { try connection.run("ROLLBACK TO job") }
          try connection.run("RELEASE job")
        } catch {
          // The savepoint machinery failed: the transaction cannot be trusted; roll it all back.
          poisoned = error
        }
      }
      var commitError: StoreError? = poisoned
      if commitError == nil {
        do {
          try connection.run("COMMIT")
        } catch {
          commitError = error
        }
      }
      if commitError != nil, connection.inTransaction { try? connection.run("ROLLBACK") }
      if relaxed { try? connection.execute("PRAGMA synchronous=FULL") }
      if commitError == nil {
        counters.commits.add(1, ordering: .relaxed)
        counters.writes.add(jobs.count, ordering: .relaxed)
      }
      for finish in finishers { finish(commitError) }
    }
  }

  /// Runs `body` in the next group transaction and returns its result once that commit is durable.
  /// - Parameter durable: `false` for bookkeeping whose loss in a power failure costs nothing but
  ///   repeated work (a webhook delivery's claim or attempt record: at worst the delivery is sent
  ///   again, which at-least-once allows): a group of such writes only commits without the fsync.
  ///   A process crash loses none of them either way.
  /// - Throws: the body's error (its changes are rolled back), or the commit's error.
  func write<T: Sendable>(
    durable: Bool = true,
    _ body: @escaping @Sendable (SQLiteConnection) throws(StoreError) -> T
  ) async throws(StoreError) -> T {
    let result: Result<T, StoreError> = await withCheckedContinuation { continuation in
      var job = WriteJob { connection in
        let outcome: Result<T, StoreError>
        do throws(StoreError) {
          outcome = .success(try body(connection))
        } catch {
          outcome = .failure(error)
        }
        var failed = false
        if case .failure = outcome { failed = true }
        return (
          failed,
          { commitError in
            if let commitError, case .success = outcome {
              continuation.resume(returning: .failure(commitError))
            } else {
              continuation.resume(returning: outcome)
            }
          }
        )
      } abandon: { error in
        continuation.resume(returning: .failure(error))
      }
      job.durable = durable
      if !queue.push(job) { job.abandon(StoreError(.unavailable, "the store is closed")) }
    }
    return try result.get()
  }

  /// Refuses new writes, lets queued ones finish and (if `wait`) waits for the thread to end.
  func close(wait: Bool = true) {
    queue.close()
    if wait { finished.wait() }
  }
}

/// Reader threads, each with its own read-only connection; any idle one takes the next read.
final class SQLiteReaderPool: Sendable {
  private let queue = JobQueue<@Sendable (SQLiteConnection) -> Void>()
  private let finished = DispatchSemaphore(value: 0)
  private let count: Int

  init(connections: [SQLiteConnection]) {
    count = connections.count
    for (i, connection) in connections.enumerated() {
      let queue = self.queue
      let finished = self.finished
      let thread = Thread {
        nameCurrentThread("sqlite-reader-\(i)")
        while true {
          let jobs = queue.take(max: 1)
          if jobs.isEmpty { break }
          for job in jobs { job(connection) }
        }
        connection.close()
        finished.signal()
      }
      thread.start()
    }
  }

  /// Runs `body` on a reader thread inside one read transaction (a consistent snapshot).
  func read<T: Sendable>(
    _ body: @escaping @Sendable (SQLiteConnection) throws(StoreError) -> T
  ) async throws(StoreError) -> T {
    let result: Result<T, StoreError> = await withCheckedContinuation { continuation in
      let accepted = queue.push { connection in
        continuation.resume(returning: connection.readTransaction(body))
      }
      if !accepted {
        continuation.resume(returning: .failure(StoreError(.unavailable, "the store is closed")))
      }
    }
    return try result.get()
  }

  /// Refuses new reads, lets queued ones finish and (if `wait`) waits for the reader threads to end.
  func close(wait: Bool = true) {
    queue.close()
    if wait { for _ in 0..<count { finished.wait() } }
  }
}

/// Read-only connections lent to the calling thread for the short, bounded reads of the hot path
/// (one user's rows, or a call's few users): the read runs where the caller is, without the
/// hand-over to a reader thread and back (two thread wake-ups and a queue for a read of tens of
/// microseconds). Each connection is used by one thread at a time; the `Mutex` that lends and takes
/// it back orders one borrower's use before the next's.
///
/// When every connection is lent out, ``read(_:)`` answers `nil` and the caller goes to the reader
/// threads instead, so the number of threads reading inline at once is bounded by the count.
final class SQLiteInlineReaders: Sendable {
  private let idle: Mutex<[SQLiteConnection]>
  private let all: [SQLiteConnection]

  init(connections: [SQLiteConnection]) {
    all = connections
    idle = Mutex(connections)
  }

  /// Runs `body` on the calling thread inside one read transaction, or returns `nil` without
  /// running it when no connection is idle (or the store is closed).
  func read<T>(_ body: (SQLiteConnection) throws(StoreError) -> T) throws(StoreError) -> T? {
    guard let connection = idle.withLock({ $0.popLast() }) else { return nil }
    defer { idle.withLock { $0.append(connection) } }
    return try connection.readTransaction(body).get()
  }

  /// Takes every connection out of use and closes it; a read in progress finishes first.
  func close() {
    var closed = 0
    while closed < all.count {
      let taken = idle.withLock { idle -> [SQLiteConnection] in
        defer { idle.removeAll() }
        return idle
      }
      for connection in taken { connection.close() }
      closed += taken.count
      if closed < all.count { usleep(100) }
    }
  }
}

extension SQLiteConnection {
  /// Runs `body` inside one read transaction (a consistent snapshot), ended whatever happens.
  func readTransaction<T>(_ body: (SQLiteConnection) throws(StoreError) -> T) -> Result<T, StoreError> {
    let outcome: Result<T, StoreError>
    do throws(StoreError) {
      try run("BEGIN")
      outcome = .success(try body(self))
    } catch {
      outcome = .failure(error)
    }
    if inTransaction { try? run("COMMIT") }
    return outcome
  }
}
