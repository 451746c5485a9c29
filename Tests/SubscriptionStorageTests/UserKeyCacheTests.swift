import SubscriptionDomain
import SubscriptionStorage
import Testing

@testable import SubscriptionStorageSQLite

/// The user-key cache keeps canonical lowercase UUIDs as 16 bytes and every other id as text, and
/// two users share an entry only when their ids, apps and environments are equal.
@Suite struct UserKeyCacheTests {
  @Test(arguments: [
    ("0f8fad5b-d9cb-469f-a165-70867728950e", true),
    ("0F8FAD5B-D9CB-469F-A165-70867728950E", false),  // uppercase: kept as text, a different user
    ("0f8fad5b-d9cb-469f-a165-70867728950", false),
    ("0f8fad5bd9cb469fa16570867728950e", false),
    ("0f8fad5b-d9cb-469f-a165-70867728950g", false),
    ("0f8fad5b+d9cb-469f-a165-70867728950e", false),
    ("user-42", false),
    ("", false),
  ])
  func userIdForms(id: String, packed: Bool) {
    let form = CompactUserKey.UserID(id)
    if case .uuid = form { #expect(packed, "\(id)") } else { #expect(!packed, "\(id)") }
  }

  @Test func distinctIdsNeverShareAnEntry() {
    let cache = UserKeyCache(capacity: 1000)
    let epoch = cache.epoch
    let ids = [
      "0f8fad5b-d9cb-469f-a165-70867728950e", "0F8FAD5B-D9CB-469F-A165-70867728950E",
      "0f8fad5b-d9cb-469f-a165-70867728950f", "1f8fad5b-d9cb-469f-a165-70867728950e", "user-42",
    ]
    for (n, id) in ids.enumerated() {
      cache.insert(UserKey(appId: "a1", environment: .production, userId: id), Int64(n), epoch: epoch)
    }
    cache.insert(UserKey(appId: "a2", environment: .production, userId: ids[0]), 100, epoch: epoch)
    cache.insert(UserKey(appId: "a1", environment: .sandbox, userId: ids[0]), 200, epoch: epoch)
    for (n, id) in ids.enumerated() {
      #expect(cache.key(of: UserKey(appId: "a1", environment: .production, userId: id)) == Int64(n))
    }
    #expect(cache.key(of: UserKey(appId: "a2", environment: .production, userId: ids[0])) == 100)
    #expect(cache.key(of: UserKey(appId: "a1", environment: .sandbox, userId: ids[0])) == 200)
    #expect(cache.key(of: UserKey(appId: "a3", environment: .production, userId: ids[0])) == nil, "an app never seen")
    #expect(cache.key(of: UserKey(appId: "a2", environment: .production, userId: ids[1])) == nil)
    #expect(cache.count == ids.count + 2)
  }

  @Test func anErasureEmptiesItAndAnOlderSnapshotCannotRefill() {
    let cache = UserKeyCache(capacity: 1000)
    let user = UserKey(appId: "a1", environment: .production, userId: "0f8fad5b-d9cb-469f-a165-70867728950e")
    let before = cache.epoch
    cache.insert(user, 7, epoch: before)
    cache.removeAll()
    #expect(cache.key(of: user) == nil)
    cache.insert(user, 7, epoch: before)
    #expect(cache.key(of: user) == nil, "read before the erasure: not cached")
    cache.insert(user, 8, epoch: cache.epoch)
    #expect(cache.key(of: user) == 8)
  }
}
