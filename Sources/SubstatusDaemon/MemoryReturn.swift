import CLinuxShims
import Dispatch
import Synchronization
import SubstatusMetrics

/// Returns the heap pages freed after a load has gone to the system.
///
/// glibc's malloc keeps freed memory in its arenas: after a storm of connections or calls the
/// process's RSS stays near its peak although the memory is free. Every `interval` this checks
/// the RSS and the load (connections plus calls in flight, with the most calls in flight at once
/// since the previous check, so that a burst shorter than the interval is seen). When a storm has
/// subsided (the load peaked at 64 or more since the previous trim and has fallen to half of
/// that peak) and the RSS
/// is at least 8 MiB over the lowest level seen, it calls `malloc_trim(0)`, which gives back
/// the free pages of every arena. In steady state it never trims; it costs one read of
/// `/proc/self/statm` per interval.
final class MemoryReturn: MetricsSource, Sendable {
  private struct State {
    var timer: (any DispatchSourceTimer)?
    /// The lowest RSS seen.
    var restingBytes = Int.max
    /// The highest load seen since the last trim.
    var peakLoad = 0
    var trims = 0
    var releasedBytes = 0
  }

  private let interval: Double
  private let state = Mutex(State())
  /// RSS growth over the resting level that makes a trim worth it.
  static let threshold = 8 << 20
  /// The load (connections and calls in flight) that makes a storm.
  static let stormLoad = 64

  private let residentBytes: @Sendable () -> Int

  /// - Parameters:
  ///   - interval: seconds between checks; 0 turns them off.
  ///   - residentBytes: the process's RSS now (tests pass their own).
  init(interval: Double, residentBytes: @escaping @Sendable () -> Int = { clinux_resident_bytes() }) {
    self.interval = interval
    self.residentBytes = residentBytes
  }

  /// How many times the checks trimmed.
  var trims: Int { state.withLock { $0.trims } }

  /// The load at one check.
  struct Load: Sendable {
    /// Connections and calls in flight now.
    var now: Int
    /// The highest load since the previous check (at least `now`).
    var peak: Int
  }

  /// Starts the checks (none when the interval is 0).
  /// - Parameter load: the load now and its peak since the previous check.
  func start(load: @escaping @Sendable () -> Load) {
    guard interval > 0 else { return }
    let period = DispatchTimeInterval.milliseconds(max(100, Int(interval * 1000)))
    state.withLock { state in
      let timer = DispatchSource.makeTimerSource(queue: .global(qos: .utility))
      timer.schedule(deadline: .now() + period, repeating: period)
      timer.setEventHandler { [weak self] in self?.check(load: load()) }
      state.timer = timer
      timer.resume()
    }
  }

  /// Stops the checks.
  func stop() {
    state.withLock {
      $0.timer?.cancel()
      $0.timer = nil
    }
  }

  /// One check: trims when the RSS grew and the load has fallen (see the type's documentation).
  func check(load: Load) {
    let rss = residentBytes()
    let shouldTrim = state.withLock { state -> Bool in
      state.peakLoad = max(state.peakLoad, load.peak, load.now)
      state.restingBytes = min(state.restingBytes, rss)
      return state.peakLoad >= Self.stormLoad && load.now * 2 <= state.peakLoad
        && rss >= state.restingBytes + Self.threshold
    }
    guard shouldTrim else { return }
    _ = clinux_malloc_trim()
    let after = residentBytes()
    state.withLock {
      $0.trims += 1
      $0.releasedBytes += max(0, rss - after)
      $0.restingBytes = min($0.restingBytes, after)
      $0.peakLoad = load.now
    }
  }

  /// The RSS, the trims and the bytes they returned, and malloc's heap, as metric families.
  func metricFamilies() -> [MetricFamily] {
    let (trims, released) = state.withLock { ($0.trims, $0.releasedBytes) }
    var (allocated, free, arenas) = (0, 0, 0)
    clinux_heap_bytes(&allocated, &free, &arenas)
    return [
      .gauge("substatus_resident_memory_bytes", "Resident set size of the process.", Int(clinux_resident_bytes())),
      .counter(
        "substatus_memory_trims_total",
        "Times freed heap pages were returned to the system after a load (--memory-trim-interval).", trims),
      .counter("substatus_memory_trimmed_bytes_total", "RSS returned to the system by those trims.", released),
      .gauge(
        "substatus_heap_allocated_bytes",
        "Bytes the process's malloc has handed out and not freed (glibc mallinfo2).", allocated),
      .gauge("substatus_heap_free_bytes", "Bytes freed but kept by malloc in its arenas.", free),
      .gauge(
        "substatus_heap_arena_bytes", "Size of malloc's arenas (allocated and free, without mmapped blocks).", arenas),
    ]
  }
}
