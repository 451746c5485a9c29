import Foundation

/// The simulator's whole state as JSON (`GET /control/state`, `PUT /control/state`,
/// `--state-file`): apps, users, transactions, subscriptions, id counters and the clock's
/// instant. Notification deliveries and faults are not part of it.
struct SimulatorSnapshot: Codable, Sendable {
  static let currentVersion = 1
  var version: Int
  var nowMs: Int64
  var apps: [String: App]
  var users: [String: User]
  var transactions: [String: Transaction]
  var transactionsByReceipt: [String: [String]]
  var subscriptions: [String: Subscription]
  var ownSubscriptionIndex: [String: String]
  var familyShares: [String: [String]]
  var nextSeq: Int
  var transactionCounter: Int64
  var webOrderCounter: Int64
  var userCounter: Int
  var revisionCounter: Int?
  var appTransactionIDs: [String: String]?
  var appTransactionCounter: Int64?
  var appDownloads: [String: AppDownload]?
}

extension SimulatorState {
  var snapshot: SimulatorSnapshot {
    SimulatorSnapshot(
      version: SimulatorSnapshot.currentVersion, nowMs: now, apps: apps, users: users,
      transactions: transactions, transactionsByReceipt: transactionsByReceipt,
      subscriptions: subscriptions, ownSubscriptionIndex: ownSubscriptionIndex,
      familyShares: familyShares, nextSeq: nextSeq, transactionCounter: transactionCounter,
      webOrderCounter: webOrderCounter, userCounter: userCounter, revisionCounter: revisionCounter,
      appTransactionIDs: appTransactionIDs, appTransactionCounter: appTransactionCounter,
      appDownloads: appDownloads)
  }

  mutating func restore(_ snapshot: SimulatorSnapshot) {
    clock.set(snapshot.nowMs)
    apps = snapshot.apps
    users = snapshot.users
    transactions = snapshot.transactions
    transactionsByReceipt = snapshot.transactionsByReceipt
    subscriptions = snapshot.subscriptions
    ownSubscriptionIndex = snapshot.ownSubscriptionIndex
    familyShares = snapshot.familyShares
    nextSeq = snapshot.nextSeq
    transactionCounter = snapshot.transactionCounter
    webOrderCounter = snapshot.webOrderCounter
    userCounter = snapshot.userCounter
    revisionCounter = snapshot.revisionCounter ?? nextSeq
    appTransactionIDs = snapshot.appTransactionIDs ?? [:]
    if let counter = snapshot.appTransactionCounter { appTransactionCounter = counter }
    appDownloads = snapshot.appDownloads ?? [:]
    pendingEvents = []
  }
}

extension AppStoreSimulator {
  /// The whole state as JSON bytes (keys sorted, so equal states give equal bytes).
  public func snapshotJSON() -> [UInt8] {
    let snapshot = state.withLock { state in
      state.advance(to: state.now)
      return state.snapshot
    }
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys]
    // Encoding plain value types cannot fail.
    return Array((try? encoder.encode(snapshot)) ?? Data("{}".utf8))
  }

  /// Replaces the whole state with a snapshot from ``snapshotJSON()``; the clock continues from
  /// the snapshot's instant.
  /// - Throws: ``SnapshotError`` when the bytes are not a snapshot of this version.
  public func restore(snapshotJSON bytes: [UInt8]) throws(SnapshotError) {
    let snapshot: SimulatorSnapshot
    do {
      snapshot = try JSONDecoder().decode(SimulatorSnapshot.self, from: Data(bytes))
    } catch {
      throw SnapshotError(message: "not a simulator snapshot: \(error)")
    }
    guard snapshot.version == SimulatorSnapshot.currentVersion else {
      throw SnapshotError(
        message: "snapshot version \(snapshot.version) is not \(SimulatorSnapshot.currentVersion)")
    }
    state.withLock { $0.restore(snapshot) }
  }
}

/// A snapshot that cannot be restored.
public struct SnapshotError: Error, Sendable, CustomStringConvertible {
  /// What is wrong with it.
  public var message: String
  /// The message.
  public var description: String { message }
}
