extension Duration {
  /// The duration in whole milliseconds.
  package var milliseconds: Int64 {
    components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000
  }

  /// The duration in seconds as a double.
  package var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
