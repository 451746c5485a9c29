import SubscriptionDomain
import SubscriptionStorage
import SubstatusEventDelivery
import SubstatusWire
import Synchronization

/// The recent events of each watched app, read from the log once for all of its WatchEvents
/// streams (docs/architecture.md "Events"; a hundred watchers of one app used to read each new
/// batch a hundred times and convert each event a hundred times).
///
/// A stream joins its app's feed (``join(appId:at:)``) at the position it starts from and reads
/// through ``read(appId:query:after:limit:seen:signal:store:)``: when the log may have grown since
/// the feed's last read (its signal ``EventSignal/generation`` is past the one the feed read at),
/// one of the app's streams reads the new events for all (the others wait for that read), and each
/// stream takes the events after its own position that pass its filters, already in wire form. A
/// stream behind the feed's window (a watch from an old cursor, or one that read slowly while
/// more than ``window`` events were appended) gets `nil` and reads the store itself, as before,
/// until it catches up. The feed keeps at most ``window`` events per app and is dropped when the
/// app's last stream ends, so its memory is bounded by the apps being watched, not by watchers.
///
/// Erasure reaches the feed (a user's erasure deletes their events from the log, and no copy may
/// outlive it): the erasing instance drops the app's window at once (``forget(appId:)``, after
/// the erasure's commit); every read of new events first counts the log's events in the window's
/// range (``SubscriptionStorage/EventLogStore/eventCount(appId:afterSequence:throughSequence:)``,
/// an index range count), and so does each new stream's first read, and a count below what the
/// window holds drops it: an erasure made by another instance sharing the database reaches a new
/// stream at once and the streams already open within a signal (about a second).
final class EventFeed: Sendable {
  /// The most events kept per watched app (each entry holds the event twice, as the domain value
  /// and as the wire message; kept only while the app is watched). Enough for a burst of ingest
  /// commits to reach a hundred streams a few seconds behind without each falling back to its own
  /// reads (with 256 the bench's streams fell behind the window and the shared read saved nothing).
  static let window = 2048

  /// One event of the feed: its log position and the message every stream sends.
  struct Entry: Sendable {
    var sequence: Int64
    var event: SubscriptionEvent
    var message: Substatus_V1_WatchEventsResponse
  }

  /// What ``read(appId:query:after:limit:seen:signal:store:)`` answers.
  struct Page: Sendable {
    /// The events after the stream's position that pass its filters, at most the limit.
    var entries: [Entry]
    /// When fewer than the limit: the position through which the log was read (the stream may
    /// continue from there: nothing it wants lies between its last event and it).
    var through: Int64
  }

  private struct Tail {
    /// Streams reading this feed.
    var watchers = 0
    /// Every event of the app logged in (`from`, `through`] is in `entries`, in log order.
    var from: Int64
    var through: Int64
    var entries: [Entry] = []
    /// The signal generation the last completed read started at; `nil`: never read.
    var readAt: UInt64?
    /// The read under way.
    var reading: Task<Void, any Error>?
    /// Tells this tail from one made after it was dropped.
    var id: UInt64
  }

  private struct State {
    var tails: [String: Tail] = [:]
    var nextId: UInt64 = 0
  }

  private let state = Mutex(State())
  /// The cursors of the messages (each event's of its app).
  private let cursors: EventCursors

  /// Creates an empty feed whose messages carry cursors made by `cursors`.
  init(cursors: EventCursors = EventCursors()) { self.cursors = cursors }

  /// A stream of `appId` starts at log position `position`.
  func join(appId: String, at position: Int64) {
    state.withLock { s in
      if s.tails[appId] == nil {
        s.nextId &+= 1
        s.tails[appId] = Tail(from: position, through: position, id: s.nextId)
      }
      s.tails[appId]!.watchers += 1
    }
  }

  /// Drops the events kept for `appId` (its users' erasure committed): the window starts again
  /// at its end, a read under way is not kept, and the streams behind read the store.
  func forget(appId: String) {
    state.withLock { s in
      guard let tail = s.tails[appId] else { return }
      s.nextId &+= 1
      var fresh = Tail(from: tail.through, through: tail.through, id: s.nextId)
      fresh.watchers = tail.watchers
      s.tails[appId] = fresh
    }
  }

  /// Drops the app's window if the log holds fewer of its events than the window does: an
  /// erasure removed some (here or on another instance).
  private func verify(appId: String, store: any EventLogStore) async throws(StoreError) {
    guard
      let (id, from, through, held) = state.withLock({ s -> (UInt64, Int64, Int64, Int)? in
        guard let tail = s.tails[appId], tail.readAt != nil, !tail.entries.isEmpty else { return nil }
        return (tail.id, tail.from, tail.through, tail.entries.count)
      })
    else { return }
    let logged = try await store.eventCount(appId: appId, afterSequence: from, throughSequence: through)
    guard logged < held else { return }
    let current = state.withLock { $0.tails[appId]?.id }
    if current == id { forget(appId: appId) }
  }

  /// A stream of `appId` ended; the app's feed goes with its last stream.
  func leave(appId: String) {
    state.withLock { s in
      guard var tail = s.tails[appId] else { return }
      tail.watchers -= 1
      s.tails[appId] = tail.watchers > 0 ? tail : nil
    }
  }

  /// The events of `appId` after `after` passing `query`, at most `limit`, read from the log once
  /// for every stream of the app; `nil` when `after` is behind the feed's window (read the store).
  /// - Parameters:
  ///   - seen: the signal generation the stream took before this read: events signalled by then
  ///     are in the answer.
  ///   - signal: the signal whose generation a new read of the log starts at.
  ///   - store: the log.
  ///   - first: the stream's first read: the window is checked against the log first (an erasure
  ///     by another instance), so a new stream never gets an erased event from it.
  /// - Throws: the store's error when the shared read failed.
  func read(
    appId: String, query: EventQuery, after: Int64, limit: Int, seen: UInt64, signal: EventSignal,
    store: any EventLogStore, first: Bool = false
  ) async throws(StoreError) -> Page? {
    if first { try await verify(appId: appId, store: store) }
    while true {
      enum Step {
        case answer(Page?)
        case wait(Task<Void, any Error>)
      }
      let step = state.withLock { s -> Step in
        guard var tail = s.tails[appId], after >= tail.from else { return .answer(nil) }
        if let readAt = tail.readAt, readAt >= seen {
          // The first entry after the stream's position, by bisection (the entries are in log order).
          var (low, high) = (0, tail.entries.count)
          while low < high {
            let middle = (low + high) / 2
            if tail.entries[middle].sequence <= after { low = middle + 1 } else { high = middle }
          }
          var entries: [Entry] = []
          for entry in tail.entries[low...] where EventLogRules.matches(entry.event, query) {
            entries.append(entry)
            if entries.count == limit { break }
          }
          return .answer(Page(entries: entries, through: max(tail.through, after)))
        }
        if let reading = tail.reading { return .wait(reading) }
        let at = signal.generation
        let (id, from) = (tail.id, tail.through)
        let window = (from: tail.from, held: tail.entries.count)
        let task = Task {
          try await self.readLog(appId: appId, id: id, after: from, window: window, at: at, store: store)
        }
        tail.reading = task
        s.tails[appId] = tail
        return .wait(task)
      }
      switch step {
      case .answer(let page): return page
      case .wait(let task):
        do { try await task.value } catch let error as StoreError { throw error } catch {
          throw StoreError(.unavailable, "the event log cannot be read: \(error)")
        }
      }
    }
  }

  /// Reads the app's events after `after` to the end of the log into its tail (if the tail is
  /// still the one the read was started for). First counts the log's events in the window
  /// (`window.from`, `after`]: fewer than the `window.held` kept means an erasure removed some,
  /// and the window is dropped (only what this read finds is kept).
  private func readLog(
    appId: String, id: UInt64, after: Int64, window: (from: Int64, held: Int), at: UInt64, store: any EventLogStore
  ) async throws {
    var through = after
    var fresh: [Entry] = []
    /// Set when more than a window was read: the position of the newest event not kept.
    var cut: Int64?
    var erased = false
    do {
      if window.held > 0 {
        erased = try await store.eventCount(appId: appId, afterSequence: window.from, throughSequence: after) < window.held
      }
      while true {
        let batch = try await store.events(appId: appId, query: EventQuery(), afterSequence: through, limit: 1000)
        for logged in batch {
          var message = Substatus_V1_WatchEventsResponse()
          message.event = logged.wire(cursors)
          fresh.append(Entry(sequence: logged.sequence, event: logged.event, message: message))
        }
        through = batch.last?.sequence ?? through
        // More than a window behind: only the newest window is kept.
        if fresh.count > Self.window {
          cut = fresh[fresh.count - Self.window - 1].sequence
          fresh.removeFirst(fresh.count - Self.window)
        }
        if batch.count < 1000 { break }
      }
    } catch {
      state.withLock { s in if s.tails[appId]?.id == id { s.tails[appId]!.reading = nil } }
      throw error
    }
    let (read, skipped) = (fresh, cut)
    state.withLock { s in
      guard var tail = s.tails[appId], tail.id == id else { return }
      tail.reading = nil
      tail.readAt = at
      if let skipped {
        tail.entries = read
        tail.from = skipped
      } else if erased {
        tail.entries = read
        tail.from = after
      } else {
        tail.entries += read
      }
      tail.through = through
      if tail.entries.count > Self.window {
        let dropped = tail.entries.count - Self.window
        tail.from = tail.entries[dropped - 1].sequence
        tail.entries.removeFirst(dropped)
      }
      s.tails[appId] = tail
    }
  }
}
