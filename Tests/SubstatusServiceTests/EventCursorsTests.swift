import Foundation
import RPCCore
import SubscriptionStorage
import Testing

@testable import SubstatusService

/// Event cursors are opaque per app (``EventCursors``): deterministic, of one length, refused in
/// another app, read under an older key of the keyring.
@Suite struct EventCursorsTests {
  static let keyring = MasterKeyring(current: try! MasterKey(bytes: Array(repeating: 7, count: 32)))

  @Test(arguments: [Int64(0), 1, 9, 10, 1_000_000, Int64.max])
  func aCursorReadsBackInItsAppAndHasOneLength(sequence: Int64) throws {
    let cursors = EventCursors(keyring: Self.keyring)
    let cursor = cursors.encode(appId: "app_a", sequence: sequence)
    #expect(cursor.utf8.count == 22)
    #expect(cursor.allSatisfy { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" })
    #expect(try cursors.decode(cursor, appId: "app_a") == sequence)
    #expect(cursors.encode(appId: "app_a", sequence: sequence) == cursor, "deterministic")
    #expect(cursors.encode(appId: "app_b", sequence: sequence) != cursor, "another app, another cursor")
    // Another instance with the same master key reads it.
    #expect(try EventCursors(keyring: Self.keyring).decode(cursor, appId: "app_a") == sequence)
  }

  @Test func neighbouringPositionsShowNoOrder() {
    let cursors = EventCursors(keyring: Self.keyring)
    let a = cursors.encode(appId: "app_a", sequence: 41)
    let b = cursors.encode(appId: "app_a", sequence: 42)
    // No shared prefix beyond chance: the block is encrypted whole.
    #expect(a.prefix(4) != b.prefix(4))
  }

  @Test(arguments: [
    "not-a-cursor", "djE6ZTQy",  // the form before (base64 of "v1:e42")
    "AAAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAA", "ÀAAAAAAAAAAAAAAAAAAAA",
  ])
  func aStringThisServiceDidNotMakeForTheAppIsRefused(cursor: String) {
    let cursors = EventCursors(keyring: Self.keyring)
    #expect(throws: RPCError.self) { try cursors.decode(cursor, appId: "app_a") }
    do {
      _ = try cursors.decode(cursor, appId: "app_a", field: "since_cursor")
    } catch {
      #expect(error.code == .invalidArgument)
      #expect(error.message.hasPrefix("since_cursor"))
      #expect(error.fieldViolations.map(\.field) == ["since_cursor"])
    }
  }

  @Test func anotherAppsCursorIsRefusedAndEmptyIsTheStart() throws {
    let cursors = EventCursors(keyring: Self.keyring)
    let cursor = cursors.encode(appId: "app_a", sequence: 42)
    #expect(throws: RPCError.self) { try cursors.decode(cursor, appId: "app_b") }
    #expect(try cursors.decode("", appId: "app_b") == 0)
  }

  @Test func aCursorMadeBeforeARotationIsStillRead() throws {
    let old = Self.keyring.current
    let new = try MasterKey(bytes: Array(repeating: 9, count: 32))
    let before = EventCursors(keyring: Self.keyring).encode(appId: "app_a", sequence: 5)
    let rotated = EventCursors(keyring: MasterKeyring(current: new, previous: [old]))
    #expect(try rotated.decode(before, appId: "app_a") == 5)
    #expect(rotated.encode(appId: "app_a", sequence: 5) != before, "new cursors under the new key")
    #expect(throws: RPCError.self) { try EventCursors(keyring: MasterKeyring(current: new)).decode(before, appId: "app_a") }
  }
}

/// The direct base64url writer of cursors agrees with Foundation's base64 made URL-safe, at every
/// length's remainder.
@Suite struct CursorBase64URLTests {
  @Test(arguments: 0...20)
  func itMatchesFoundationsBase64MadeURLSafe(length: Int) {
    let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 97 &+ 251) }
    let expected = Data(bytes).base64EncodedString()
      .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
      .replacingOccurrences(of: "=", with: "")
    #expect(EventCursors.base64URL(bytes) == expected)
  }
}
