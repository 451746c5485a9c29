import Testing
@testable import SubscriptionStorage

@Test func SubscriptionStorageLinks() { #expect(String(describing: SubscriptionStorageModule.self).contains("SubscriptionStorage")) }
