// The one way tests wait: for a condition, with a bound, never for a fixed time.

/// Waits until `condition` holds, checking it every `interval` of `clock`, for at most `timeout`
/// of that clock; the last check is made at the bound.
///
/// Tests wait for what they expect to see (a record, a file, a counter), never for a fixed time: a
/// fast machine goes on at once and a loaded one gets the whole bound. Pass the clock the code under
/// test reads when it has one (the default is the real clock).
///
/// ```swift
/// #expect(await waitUntil { receiver.records.count == 3 })
/// ```
/// - Parameters:
///   - clock: The clock of the bound and of the pauses between checks.
///   - timeout: How long to wait at most.
///   - interval: The pause between checks.
///   - condition: What to wait for.
/// - Returns: whether `condition` held.
public func waitUntil<C: Clock>(
  on clock: C, timeout: Duration = .seconds(10), every interval: Duration = .milliseconds(5),
  _ condition: () async throws -> Bool
) async rethrows -> Bool where C.Duration == Duration {
  let end = clock.now.advanced(by: timeout)
  while clock.now < end {
    if try await condition() { return true }
    do { try await clock.sleep(for: interval) } catch { break }
  }
  return try await condition()
}

/// ``waitUntil(on:timeout:every:_:)`` on the real clock (`ContinuousClock`).
/// - Parameters:
///   - timeout: How long to wait at most.
///   - interval: The pause between checks.
///   - condition: What to wait for.
/// - Returns: whether `condition` held.
public func waitUntil(
  timeout: Duration = .seconds(10), every interval: Duration = .milliseconds(5), _ condition: () async throws -> Bool
) async rethrows -> Bool {
  try await waitUntil(on: ContinuousClock(), timeout: timeout, every: interval, condition)
}

/// Waits until `value` gives something, as ``waitUntil(timeout:every:_:)`` waits for a condition.
/// - Returns: the first value given, or `nil` after `timeout`.
public func waitForValue<T>(
  timeout: Duration = .seconds(10), every interval: Duration = .milliseconds(5), _ value: () async throws -> T?
) async rethrows -> T? {
  var found: T?
  _ = try await waitUntil(timeout: timeout, every: interval) {
    found = try await value()
    return found != nil
  }
  return found
}
