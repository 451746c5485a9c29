import SubstatusMetrics
import Testing

/// The one renderer and the instruments: the exposition format byte for byte, histograms
/// cumulative, bounded counts by slot, the registry in registration order.
@Suite struct PrometheusTextTests {
  @Test(arguments: [
    (MetricFamily.counter("a_total", "As seen.", 3), "# HELP a_total As seen.\n# TYPE a_total counter\na_total 3\n"),
    (MetricFamily.counter("b_total", "Bs.", UInt64.max), "# HELP b_total Bs.\n# TYPE b_total counter\nb_total 18446744073709551615\n"),
    (MetricFamily.gauge("c", "C now.", -2), "# HELP c C now.\n# TYPE c gauge\nc -2\n"),
    (
      MetricFamily.labelled("d_total", "Ds by reason.", .counter, label: "reason", [("idle", 1), ("max_age", 0)]),
      "# HELP d_total Ds by reason.\n# TYPE d_total counter\nd_total{reason=\"idle\"} 1\nd_total{reason=\"max_age\"} 0\n"
    ),
    (
      MetricFamily(name: "e", help: "E.", type: .gauge, samples: [.value([("a", "x"), ("b", "y\"\\\nz")], .double(0.25))]),
      "# HELP e E.\n# TYPE e gauge\ne{a=\"x\",b=\"y\\\"\\\\\\nz\"} 0.25\n"
    ),
    (MetricFamily(name: "f", help: "Empty.", type: .counter), "# HELP f Empty.\n# TYPE f counter\n"),
  ])
  func familiesAreWrittenInTheExpositionFormat(family: MetricFamily, text: String) {
    #expect(PrometheusText.render([family]) == text)
  }

  @Test func aHistogramIsCumulativeWithInfSumAndCountAndItsLabelsBeforeLe() {
    var h = HistogramValues(HistogramBuckets([0.5, 1, 2.5]))
    for v in [0.25, 0.5, 0.75, 3] { h.observe(v) }
    let labelled = MetricFamily(
      name: "d_seconds", help: "D.", type: .histogram, samples: [.histogram([("method", "/a.B/C")], h.snapshot)])
    #expect(
      PrometheusText.render([labelled]) == """
        # HELP d_seconds D.
        # TYPE d_seconds histogram
        d_seconds_bucket{method="/a.B/C",le="0.5"} 2
        d_seconds_bucket{method="/a.B/C",le="1.0"} 3
        d_seconds_bucket{method="/a.B/C",le="2.5"} 3
        d_seconds_bucket{method="/a.B/C",le="+Inf"} 4
        d_seconds_sum{method="/a.B/C"} 4.5
        d_seconds_count{method="/a.B/C"} 4

        """)
    let bare = MetricFamily(name: "u_seconds", help: "U.", type: .histogram, samples: [.histogram([], h.snapshot)])
    #expect(PrometheusText.render([bare]).contains("u_seconds_bucket{le=\"+Inf\"} 4\nu_seconds_sum 4.5\nu_seconds_count 4\n"))
  }

  @Test func boundedCountsCountBySlotAndIgnoreOutOfRange() {
    var c = BoundedCounts(values: ["OK", "CANCELLED", "UNKNOWN"])
    c.add(at: 2)
    c.add(2, at: 0)
    c.add(at: 7)
    c.add(at: -1)
    #expect(c.all.map(\.1) == [2, 0, 1])
    #expect(c.nonZeroSortedByValue.map(\.0) == ["OK", "UNKNOWN"])
  }

  @Test func counterAndGaugeUpdateInPlace() {
    let c = Counter()
    c.increment()
    c.increment(by: 4)
    #expect(c.value == 5)
    let g = Gauge()
    g.add(3)
    g.add(-1)
    #expect(g.value == 2)
    g.set(9)
    #expect(g.value == 9)
  }

  struct Source: MetricsSource, Sendable {
    let name: String
    func metricFamilies() -> [MetricFamily] { [.gauge(name, "\(name).", 1)] }
  }

  @Test func theRegistryReadsItsSourcesAtEachScrapeInTheOrderRegistered() {
    let registry = MetricsRegistry()
    let counter = Counter()
    registry.register(Source(name: "first"))
    registry.register { [.counter("second_total", "Second.", counter.value)] }
    counter.increment()
    #expect(registry.families().map(\.name) == ["first", "second_total"])
    #expect(registry.prometheusText().hasSuffix("second_total 1\n"))
    #expect(Source(name: "x").prometheusText() == "# HELP x x.\n# TYPE x gauge\nx 1\n")
  }
}
