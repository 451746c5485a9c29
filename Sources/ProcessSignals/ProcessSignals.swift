// Signal handling for the executables (substatusd, appstore-sim, substatus-bench-server).
import CLinuxShims
import Foundation
import Synchronization

/// Runs actions when the process receives signals such as SIGTERM, SIGINT or SIGHUP.
///
/// A C handler installed with `sigaction` writes each signal's number to a pipe; one thread reads
/// the pipe and runs the actions registered for that number, in registration order. A signal that
/// arrives any time after ``on(_:_:)`` returns is delivered. (A Dispatch signal source needs the
/// signal set to `SIG_IGN` first, and until the source is armed on Dispatch's own thread, a signal
/// sent to the process is dropped: a SIGTERM right after start-up was lost that way.)
public enum ProcessSignals {
  private static let actions = Mutex<[Int32: [@Sendable () -> Void]]>([:])
  private static let reader = Mutex<Bool>(false)

  /// Runs `action` on the signal thread each time one of `signals` arrives. Actions should be
  /// quick (start a shutdown, reload a file); they run one after another.
  /// - Returns: `false` if a handler could not be installed (the signal keeps its default action).
  @discardableResult
  public static func on(_ signals: [Int32], _ action: @escaping @Sendable () -> Void) -> Bool {
    actions.withLock { table in
      for number in signals { table[number, default: []].append(action) }
    }
    var installed = true
    for number in signals {
      let fd = clinux_catch_signal(number)
      if fd < 0 {
        installed = false
        continue
      }
      startReader(fd)
    }
    return installed
  }

  /// Suspends until one of `signals` arrives (after this call).
  public static func wait(for signals: [Int32]) async {
    let (stream, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
    on(signals) { continuation.yield() }
    for await _ in stream { break }
  }

  private static func startReader(_ fd: Int32) {
    let start = reader.withLock { started -> Bool in
      defer { started = true }
      return !started
    }
    guard start else { return }
    let thread = Thread {
      while true {
        let number = clinux_next_signal(fd)
        if number < 0 { return }
        let registered = actions.withLock { $0[number] ?? [] }
        for action in registered { action() }
      }
    }
    thread.name = "signals"
    thread.start()
  }
}
