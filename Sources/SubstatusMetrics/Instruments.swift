import Synchronization

/// A count that only goes up, updated in place with one relaxed atomic add (no lock, nothing
/// allocated).
public final class Counter: Sendable {
  private let storage = Atomic<Int>(0)

  /// A counter at 0.
  public init() {}

  /// Adds `n` (at least 0).
  public func increment(by n: Int = 1) { storage.add(n, ordering: .relaxed) }

  /// The count now.
  public var value: Int { storage.load(ordering: .relaxed) }
}

/// A value that goes up and down, updated in place with one relaxed atomic operation.
public final class Gauge: Sendable {
  private let storage = Atomic<Int>(0)

  /// A gauge at 0.
  public init() {}

  /// Adds `n` (may be negative).
  public func add(_ n: Int) { storage.add(n, ordering: .relaxed) }

  /// Sets the value.
  public func set(_ n: Int) { storage.store(n, ordering: .relaxed) }

  /// The value now.
  public var value: Int { storage.load(ordering: .relaxed) }
}

/// Fixed histogram bucket bounds, shared by every series of a family.
public struct HistogramBuckets: Sendable, Equatable {
  /// The upper bounds, ascending; `+Inf` is implied.
  public let bounds: [Double]

  /// Buckets with these ascending upper bounds.
  public init(_ bounds: [Double]) {
    precondition(zip(bounds, bounds.dropFirst()).allSatisfy { $0 < $1 }, "bucket bounds ascend")
    self.bounds = bounds
  }

  /// Latencies in seconds, 0.5 ms to 10 s.
  public static let latencySeconds = HistogramBuckets(
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10])
}

/// The counts of one histogram series, a plain value to hold in a `Mutex` with its owner's other
/// counters and update in place: observing touches the buckets already allocated and allocates
/// nothing.
public struct HistogramValues: Sendable {
  /// The bounds.
  public let buckets: HistogramBuckets
  private var counts: [UInt64]
  private var sum = 0.0
  private var count: UInt64 = 0

  /// No observations.
  public init(_ buckets: HistogramBuckets) {
    self.buckets = buckets
    counts = [UInt64](repeating: 0, count: buckets.bounds.count)
  }

  /// Counts one observation: in every bucket from the first whose bound holds it on (cumulative).
  public mutating func observe(_ value: Double) {
    let bounds = buckets.bounds
    counts.withUnsafeMutableBufferPointer { counts in
      var i = counts.count
      while i > 0, value <= bounds[i - 1] { i -= 1 }
      for k in i..<counts.count { counts[k] += 1 }
    }
    sum += value
    count += 1
  }

  /// The observations so far, for a family's sample.
  public var snapshot: HistogramSnapshot {
    HistogramSnapshot(bounds: buckets.bounds, cumulativeCounts: counts, sum: sum, count: count)
  }
}

/// Counts by a label whose values are a bounded set known up front (gRPC codes, protocols,
/// reasons): one slot per value, indexed by the value's position, a plain value to hold in a
/// `Mutex` and update in place (no dictionary, no hashing, nothing allocated per count).
public struct BoundedCounts: Sendable {
  /// The label's values, in slot order.
  public let values: [String]
  private var counts: [UInt64]

  /// Zero counts for each of `values`.
  public init(values: [String]) {
    self.values = values
    counts = [UInt64](repeating: 0, count: values.count)
  }

  /// Adds `n` to the value at `index` (ignored when out of range).
  public mutating func add(_ n: UInt64 = 1, at index: Int) {
    guard counts.indices.contains(index) else { return }
    counts.withUnsafeMutableBufferPointer { $0[index] &+= n }
  }

  /// The count of the value at `index`.
  public func count(at index: Int) -> UInt64 { counts.indices.contains(index) ? counts[index] : 0 }

  /// Every value with its count, in slot order.
  public var all: [(String, UInt64)] { zip(values, counts).map { ($0, $1) } }

  /// The values counted at least once with their counts, sorted by value.
  public var nonZeroSortedByValue: [(String, UInt64)] {
    all.filter { $0.1 > 0 }.sorted { $0.0 < $1.0 }
  }
}

/// The metrics of a process: the components' sources in the order registered, read at each scrape
/// and written by the one renderer (``PrometheusText``).
public final class MetricsRegistry: Sendable {
  private let sources = Mutex<[@Sendable () -> [MetricFamily]]>([])

  /// A registry without sources.
  public init() {}

  /// Adds a source of families, read at each scrape after the ones added before it.
  public func register(_ source: @escaping @Sendable () -> [MetricFamily]) {
    sources.withLock { $0.append(source) }
  }

  /// Adds a component's families, read at each scrape after the ones added before it.
  public func register(_ source: some MetricsSource & Sendable) {
    register { source.metricFamilies() }
  }

  /// Every source's families, in the order registered.
  public func families() -> [MetricFamily] {
    sources.withLock { $0 }.flatMap { $0() }
  }

  /// Every family in the Prometheus text exposition format (version 0.0.4).
  public func prometheusText() -> String { PrometheusText.render(families()) }
}
