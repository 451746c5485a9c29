import Synchronization

/// Certificate chains that passed validation, by their `x5c` text. Apple signs with a handful of
/// leaf certificates at a time, so nearly every JWS repeats a chain already seen; a hit skips
/// parsing the three certificates, path validation and the marker checks. It never skips what
/// depends on the JWS: the caller's trusted roots must contain the chain's root, the signedDate
/// must lie inside every certificate's validity period (the only way path validation depends on
/// time, as no revocation lists are used), and the signature is always checked.
final class VerifiedChainCache: Sendable {
  struct Entry: Sendable {
    /// Leaf, intermediate, root.
    let chain: [X509Certificate]
    let leafKey: ES256PublicKey
    /// Seconds since 1970: path validation succeeds at t when notBefore <= t < notAfter.
    let notBefore: Int64
    let notAfter: Int64

    func isValid(atSeconds seconds: Int64) -> Bool { notBefore <= seconds && seconds < notAfter }
  }

  private struct State {
    var entries: [[String]: Entry] = [:]
    var insertionOrder: [[String]] = []
  }

  private let state = Mutex(State())
  /// The most entries kept; the oldest goes first.
  let capacity: Int

  init(capacity: Int) { self.capacity = max(1, capacity) }

  /// The process-wide cache used by ``SignedDataVerifier``.
  static let shared = VerifiedChainCache(capacity: 32)

  func entry(for x5c: [String]) -> Entry? {
    state.withLock { $0.entries[x5c] }
  }

  func insert(_ entry: Entry, for x5c: [String]) {
    state.withLock { state in
      if state.entries.updateValue(entry, forKey: x5c) == nil {
        state.insertionOrder.append(x5c)
        if state.insertionOrder.count > capacity {
          state.entries[state.insertionOrder.removeFirst()] = nil
        }
      }
    }
  }

  /// The number of entries (for tests).
  var count: Int { state.withLock { $0.entries.count } }
}
