/// The one writer of the Prometheus text exposition format (version 0.0.4) in substatus.
///
/// A family is written as `# HELP name help`, `# TYPE name type`, then its samples:
/// `name{label="value",...} value` (no braces without labels); a histogram as its `_bucket`
/// series (each bound's cumulative count, `le` last, then `le="+Inf"` with the count), `_sum` and
/// `_count`. Numbers are written as Swift describes them (`12`, `0.0005`, `1.0`). Label values are
/// escaped as the format asks (`\\`, `\"`, `\n`).
public enum PrometheusText {
  /// The families' text, in order.
  public static func render(_ families: [MetricFamily]) -> String {
    var out = ""
    for family in families { append(family, to: &out) }
    return out
  }

  /// Appends one family's text to `out`.
  public static func append(_ family: MetricFamily, to out: inout String) {
    out += "# HELP \(family.name) \(family.help)\n# TYPE \(family.name) \(family.type.rawValue)\n"
    for sample in family.samples {
      switch sample {
      case .value(let labels, let value):
        out += family.name
        appendLabels(labels, to: &out)
        out += " "
        appendValue(value, to: &out)
        out += "\n"
      case .histogram(let labels, let h):
        for (bound, n) in zip(h.bounds, h.cumulativeCounts) {
          out += family.name + "_bucket"
          appendLabels(labels + [("le", "\(bound)")], to: &out)
          out += " \(n)\n"
        }
        out += family.name + "_bucket"
        appendLabels(labels + [("le", "+Inf")], to: &out)
        out += " \(h.count)\n"
        out += family.name + "_sum"
        appendLabels(labels, to: &out)
        out += " \(h.sum)\n"
        out += family.name + "_count"
        appendLabels(labels, to: &out)
        out += " \(h.count)\n"
      }
    }
  }

  private static func appendValue(_ value: MetricValue, to out: inout String) {
    switch value {
    case .integer(let v): out += "\(v)"
    case .unsigned(let v): out += "\(v)"
    case .double(let v): out += "\(v)"
    }
  }

  private static func appendLabels(_ labels: MetricLabels, to out: inout String) {
    guard !labels.isEmpty else { return }
    out += "{"
    for (i, label) in labels.enumerated() {
      if i > 0 { out += "," }
      out += label.name
      out += "=\""
      out += escaped(label.value)
      out += "\""
    }
    out += "}"
  }

  /// `value` with `\`, `"` and newlines escaped (most values need none and are returned as they are).
  static func escaped(_ value: String) -> String {
    guard value.utf8.contains(where: { $0 == UInt8(ascii: "\\") || $0 == UInt8(ascii: "\"") || $0 == 0x0A }) else {
      return value
    }
    var out = ""
    for c in value.unicodeScalars {
      switch c {
      case "\\": out += "\\\\"
      case "\"": out += "\\\""
      case "\n": out += "\\n"
      default: out.unicodeScalars.append(c)
      }
    }
    return out
  }
}
