import CLinuxShims
import Dispatch
import Foundation
import SubstatusClock
import Synchronization

/// Something registered with an event loop for readiness events on a file descriptor.
protocol LoopChannel: AnyObject {
  /// Called on the loop thread with the epoll event mask.
  func handleEvents(readable: Bool, writable: Bool, hangup: Bool)
}

/// Monotonic time in nanoseconds (the loop's clock's `monotonicNow`).
typealias Nanoseconds = UInt64

/// Epoll constants (Linux, all architectures).
enum Epoll {
  static let input: UInt32 = 0x001
  static let output: UInt32 = 0x004
  static let error: UInt32 = 0x008
  static let hangup: UInt32 = 0x010
  static let readHangup: UInt32 = 0x2000
}

/// One thread running epoll: it owns its channels (sockets), timers and a mailbox that other
/// threads post work to, woken through an eventfd.
///
/// The loop is also a `TaskExecutor`: a task started with it as executor preference runs its
/// nonisolated code on the loop thread, between polls. A job enqueued from the loop thread itself
/// (a task started or resumed by the loop) goes on a plain local queue with no lock and no
/// wake-up; a job enqueued from any other thread goes through the mailbox, and the mailbox signals
/// the eventfd once until the loop drains it, however many jobs arrive meanwhile.
///
/// Everything but ``execute(_:)``, ``enqueue(_:)``, ``isCurrentThread`` and ``stop()`` must run on
/// the loop's own thread; this is why the class is `@unchecked Sendable`.
final class EventLoop: TaskExecutor, @unchecked Sendable {
  private struct Mailbox {
    var jobs: [@Sendable () -> Void] = []
    var tasks: [UnownedJob] = []
    var signalled = false
    /// ``run()`` has returned: task jobs run on Dispatch from now on.
    var finished = false
  }
  private let epollFD: Int32
  private let wakeFD: Int32
  private let mailbox = Mutex(Mailbox())
  /// Task jobs enqueued from the loop thread; run before the end of the iteration.
  private var localTasks: [UnownedJob] = []
  private var runningTasks: [UnownedJob] = []
  private var channels: [UInt64: any LoopChannel] = [:]
  private var nextToken: UInt64 = 1
  private var timers = TimerHeap()
  /// The time every timer of this loop reads.
  let clock: any ServiceClock
  /// The longest wait in epoll: 1 s with the system clock; with another clock (a test's manual
  /// clock, which moves without waking anyone), short enough that timers notice it soon.
  private let maxPollMilliseconds: Int32
  private var flushList: [() -> Void] = []
  private var runningFlushes: [() -> Void] = []
  private var running = true
  /// A buffer for reads, shared by all channels of this loop.
  let readBuffer: UnsafeMutableRawBufferPointer
  let name: String

  init(name: String, clock: any ServiceClock) throws {
    self.name = name
    self.clock = clock
    maxPollMilliseconds = clock is SystemClock ? 1000 : 5
    epollFD = clinux_epoll_create()
    wakeFD = clinux_eventfd()
    guard epollFD >= 0, wakeFD >= 0 else { throw SocketError.system("epoll/eventfd", errno) }
    readBuffer = .allocate(byteCount: 256 << 10, alignment: 16)
    _ = clinux_epoll_ctl(epollFD, 1, wakeFD, Epoll.input, 0)
  }

  deinit {
    readBuffer.deallocate()
    close(epollFD)
    close(wakeFD)
  }

  /// Runs `job` on the loop thread soon. Safe from any thread. After the loop has ended the job
  /// is dropped (kept, it could hold what holds the loop: a cycle that would never be freed).
  /// - Returns: `false` if the job was dropped.
  @discardableResult
  func execute(_ job: @escaping @Sendable () -> Void) -> Bool {
    let (accepted, signal) = mailbox.withLock { box -> (Bool, Bool) in
      if box.finished { return (false, false) }
      box.jobs.append(job)
      if box.signalled { return (true, false) }
      box.signalled = true
      return (true, true)
    }
    if signal { clinux_eventfd_signal(wakeFD) }
    return accepted
  }

  /// Whether the caller runs on the loop thread (a thread-local compare, no atomics).
  var isCurrentThread: Bool { clinux_current_loop() == Unmanaged.passUnretained(self).toOpaque() }

  /// Whether the caller runs on the thread of any event loop.
  static var onAnyLoopThread: Bool { clinux_current_loop() != nil }

  /// Runs a task's job on the loop thread (`TaskExecutor`). Safe from any thread.
  func enqueue(_ job: consuming ExecutorJob) {
    let job = UnownedJob(job)
    if isCurrentThread {
      localTasks.append(job)
      return
    }
    enum Action { case signal, none, runElsewhere }
    let action = mailbox.withLock { box -> Action in
      if box.finished { return .runElsewhere }
      box.tasks.append(job)
      if box.signalled { return .none }
      box.signalled = true
      return .signal
    }
    switch action {
    case .signal: clinux_eventfd_signal(wakeFD)
    case .none: break
    case .runElsewhere: runAfterLoop([job])
    }
  }

  /// Runs task jobs that arrive after the loop has ended (a handler resumed after shutdown) on
  /// Dispatch, so that the task finishes instead of waiting forever. Their writes to the session
  /// go to the mailbox, which nobody reads any more.
  private func runAfterLoop(_ jobs: [UnownedJob]) {
    guard !jobs.isEmpty else { return }
    let executor = asUnownedTaskExecutor()
    DispatchQueue.global().async {
      for job in jobs { job.runSynchronously(on: executor) }
    }
  }

  /// Registers a channel for a descriptor; returns its token.
  func register(fd: Int32, events: UInt32, channel: any LoopChannel) -> UInt64 {
    let token = nextToken
    nextToken += 1
    channels[token] = channel
    _ = clinux_epoll_ctl(epollFD, 1, fd, events, token)
    return token
  }

  /// Changes the events a descriptor is watched for.
  func modify(fd: Int32, events: UInt32, token: UInt64) {
    _ = clinux_epoll_ctl(epollFD, 3, fd, events, token)
  }

  /// Unregisters a descriptor (before closing it).
  func unregister(fd: Int32, token: UInt64) {
    _ = clinux_epoll_ctl(epollFD, 2, fd, 0, token)
    channels[token] = nil
  }

  /// The number of registered channels.
  var channelCount: Int { channels.count }

  /// Calls `action` once, at the end of this loop iteration (batches output per wake-up).
  func deferUntilEndOfIteration(_ action: @escaping () -> Void) { flushList.append(action) }

  /// The loop's clock's monotonic time.
  var now: Duration { clock.monotonicNow }

  /// Schedules `action` at a time of the loop's clock; returns an id for ``cancelTimer(_:)``.
  @discardableResult
  func schedule(at when: Duration, _ action: @escaping () -> Void) -> UInt64 {
    timers.schedule(at: when.nanoseconds, action)
  }

  /// Schedules `action` after `delay` of the loop's clock; returns an id for ``cancelTimer(_:)``.
  @discardableResult
  func schedule(after delay: Duration, _ action: @escaping () -> Void) -> UInt64 {
    schedule(at: now + delay, action)
  }

  /// Cancels a timer; harmless when it already ran.
  func cancelTimer(_ id: UInt64) { timers.cancel(id) }

  /// Makes ``run()`` return after the current iteration.
  func stop() { execute { [self] in running = false } }

  /// Runs the loop on the calling thread until ``stop()``.
  func run() {
    let maxEvents = 256
    let tokens = UnsafeMutablePointer<UInt64>.allocate(capacity: maxEvents)
    let masks = UnsafeMutablePointer<UInt32>.allocate(capacity: maxEvents)
    defer {
      tokens.deallocate()
      masks.deallocate()
    }
    clinux_set_current_loop(Unmanaged.passUnretained(self).toOpaque())
    defer {
      clinux_set_current_loop(nil)
      let leftover = mailbox.withLock { box -> [UnownedJob] in
        box.finished = true
        box.jobs.removeAll()
        defer { box.tasks.removeAll() }
        return box.tasks
      }
      runAfterLoop(localTasks + leftover)
      localTasks.removeAll()
    }
    while running {
      let timeout = localTasks.isEmpty ? timers.timeoutMilliseconds(now: now.nanoseconds, max: maxPollMilliseconds) : 0
      let n = clinux_epoll_wait(epollFD, tokens, masks, Int32(maxEvents), timeout)
      if n > 0 {
        for i in 0..<Int(n) {
          let token = tokens[i]
          if token == 0 {
            clinux_eventfd_drain(wakeFD)
            continue
          }
          guard let channel = channels[token] else { continue }
          let mask = masks[i]
          channel.handleEvents(
            readable: mask & (Epoll.input | Epoll.readHangup) != 0, writable: mask & Epoll.output != 0,
            hangup: mask & (Epoll.hangup | Epoll.error) != 0)
        }
      }
      runJobs()
      for action in timers.popDue(now: now.nanoseconds) { action() }
      runJobs()
      runLocalTasks()
      while !flushList.isEmpty {
        // Swapped with a spare array: handing the list out and emptying it in place would copy
        // its storage on every iteration.
        swap(&flushList, &runningFlushes)
        for action in runningFlushes { action() }
        runningFlushes.removeAll(keepingCapacity: true)
      }
    }
  }

  private func runJobs() {
    let (jobs, tasks) = mailbox.withLock { box -> ([@Sendable () -> Void], [UnownedJob]) in
      box.signalled = false
      // Nothing to hand out (most wake-ups): returning the arrays would make emptying them copy.
      if box.jobs.isEmpty && box.tasks.isEmpty { return ([], []) }
      defer {
        box.jobs.removeAll(keepingCapacity: true)
        box.tasks.removeAll(keepingCapacity: true)
      }
      return (box.jobs, box.tasks)
    }
    for job in jobs { job() }
    if !tasks.isEmpty { localTasks.append(contentsOf: tasks) }
    runLocalTasks()
  }

  /// Runs the task jobs queued on this thread, and those they enqueue in turn, a bounded number of
  /// rounds (a task that keeps yielding must not starve the sockets; the rest runs after a poll).
  private func runLocalTasks() {
    var rounds = 0
    while !localTasks.isEmpty && rounds < 8 {
      rounds += 1
      swap(&localTasks, &runningTasks)
      for job in runningTasks { job.runSynchronously(on: asUnownedTaskExecutor()) }
      runningTasks.removeAll(keepingCapacity: true)
    }
  }

  /// Starts a thread running this loop; `onExit` runs on it after the loop ends.
  func startThread(onExit: @escaping @Sendable () -> Void) {
    let thread = Thread { [self] in
      self.run()
      onExit()
    }
    thread.name = name
    thread.stackSize = 1 << 20
    thread.start()
  }
}

/// A binary min-heap of timers with lazy cancellation.
struct TimerHeap {
  private var heap: [(when: Nanoseconds, id: UInt64)] = []
  private var actions: [UInt64: () -> Void] = [:]
  private var nextID: UInt64 = 1

  mutating func schedule(at when: Nanoseconds, _ action: @escaping () -> Void) -> UInt64 {
    let id = nextID
    nextID += 1
    actions[id] = action
    heap.append((when, id))
    var i = heap.count - 1
    while i > 0 {
      let parent = (i - 1) / 2
      guard heap[parent].when > heap[i].when else { break }
      heap.swapAt(parent, i)
      i = parent
    }
    return id
  }

  mutating func cancel(_ id: UInt64) { actions[id] = nil }

  func timeoutMilliseconds(now: Nanoseconds, max: Int32) -> Int32 {
    guard let first = heap.first else { return max }
    if first.when <= now { return 0 }
    return Int32(min(UInt64(max), (first.when - now + 999_999) / 1_000_000))
  }

  /// Removes and returns the actions that are due (run them after this call: they may schedule).
  mutating func popDue(now: Nanoseconds) -> [() -> Void] {
    var due: [() -> Void] = []
    while let first = heap.first, first.when <= now {
      pop()
      if let action = actions.removeValue(forKey: first.id) { due.append(action) }
    }
    if heap.count > 64 && actions.count < heap.count / 4 {
      heap.removeAll { actions[$0.id] == nil }
      heap.sort { $0.when < $1.when }
    }
    return due
  }

  private mutating func pop() {
    heap.swapAt(0, heap.count - 1)
    heap.removeLast()
    var i = 0
    while true {
      let l = 2 * i + 1
      let r = l + 1
      var smallest = i
      if l < heap.count && heap[l].when < heap[smallest].when { smallest = l }
      if r < heap.count && heap[r].when < heap[smallest].when { smallest = r }
      if smallest == i { return }
      heap.swapAt(i, smallest)
      i = smallest
    }
  }
}
