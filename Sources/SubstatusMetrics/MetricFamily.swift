/// What a metric family counts: the `# TYPE` of the Prometheus text format.
public enum MetricType: String, Sendable {
  /// A count that only goes up (restarts at 0 with the process).
  case counter
  /// A value that goes up and down (a size, a cap, what is open now).
  case gauge
  /// Observations in fixed buckets, with their sum and count.
  case histogram
}

/// One sample's value, kept as the kind of number it was counted in so that it is written as
/// that number (`12`, `0.25`), never converted.
public enum MetricValue: Sendable, Equatable {
  /// A signed count or size.
  case integer(Int)
  /// An unsigned count.
  case unsigned(UInt64)
  /// A measurement (seconds, a ratio).
  case double(Double)
}

/// A sample's labels, in the order written: `[("method", "/a.B/C"), ("code", "OK")]`.
public typealias MetricLabels = [(name: String, value: String)]

/// The counts of one histogram series: the cumulative count at each bucket's upper bound (the
/// bounds are the family's), the sum of the observations and their count.
public struct HistogramSnapshot: Sendable, Equatable {
  /// The upper bounds of the buckets, ascending; `+Inf` is implied.
  public let bounds: [Double]
  /// Observations at most each bound (cumulative), one per bound.
  public let cumulativeCounts: [UInt64]
  /// The sum of the observations.
  public let sum: Double
  /// The number of observations (the `+Inf` bucket).
  public let count: UInt64

  /// A snapshot; `cumulativeCounts` has one count per bound.
  public init(bounds: [Double], cumulativeCounts: [UInt64], sum: Double, count: UInt64) {
    precondition(bounds.count == cumulativeCounts.count, "one count per bucket bound")
    self.bounds = bounds
    self.cumulativeCounts = cumulativeCounts
    self.sum = sum
    self.count = count
  }
}

/// One metric family as `/metrics` shows it: its name, `# HELP` text, `# TYPE` and samples.
/// Components describe their metrics with these; ``PrometheusText`` is the one place that writes
/// them out.
public struct MetricFamily: Sendable {
  /// One series of the family.
  public enum Sample: Sendable {
    /// A counter's or gauge's value with its labels.
    case value(MetricLabels, MetricValue)
    /// A histogram's buckets, sum and count with its labels (`le` is added per bucket).
    case histogram(MetricLabels, HistogramSnapshot)
  }

  /// The family's name (`substatus_rpcs_total`).
  public let name: String
  /// The `# HELP` text, one line.
  public let help: String
  /// The `# TYPE`.
  public let type: MetricType
  /// The series, written in this order.
  public var samples: [Sample]

  /// A family with its samples.
  public init(name: String, help: String, type: MetricType, samples: [Sample] = []) {
    self.name = name
    self.help = help
    self.type = type
    self.samples = samples
  }

  /// A counter with one unlabelled value.
  public static func counter(_ name: String, _ help: String, _ value: Int) -> MetricFamily {
    MetricFamily(name: name, help: help, type: .counter, samples: [.value([], .integer(value))])
  }

  /// A counter with one unlabelled value.
  public static func counter(_ name: String, _ help: String, _ value: UInt64) -> MetricFamily {
    MetricFamily(name: name, help: help, type: .counter, samples: [.value([], .unsigned(value))])
  }

  /// A gauge with one unlabelled value.
  public static func gauge(_ name: String, _ help: String, _ value: Int) -> MetricFamily {
    MetricFamily(name: name, help: help, type: .gauge, samples: [.value([], .integer(value))])
  }

  /// A family whose series differ by one label: one sample per `(label value, value)`, in order.
  public static func labelled(
    _ name: String, _ help: String, _ type: MetricType, label: String, _ values: [(String, Int)]
  ) -> MetricFamily {
    MetricFamily(
      name: name, help: help, type: type, samples: values.map { .value([(label, $0.0)], .integer($0.1)) })
  }

  /// A family whose series differ by one label: one sample per `(label value, value)`, in order.
  public static func labelled(
    _ name: String, _ help: String, _ type: MetricType, label: String, _ values: [(String, UInt64)]
  ) -> MetricFamily {
    MetricFamily(
      name: name, help: help, type: type, samples: values.map { .value([(label, $0.0)], .unsigned($0.1)) })
  }
}

/// Something that describes its metrics as families at the time of a scrape.
public protocol MetricsSource {
  /// The families, in the order `/metrics` shows them.
  func metricFamilies() -> [MetricFamily]
}

extension MetricsSource {
  /// The families in the Prometheus text exposition format (version 0.0.4).
  public func prometheusText() -> String { PrometheusText.render(metricFamilies()) }
}
