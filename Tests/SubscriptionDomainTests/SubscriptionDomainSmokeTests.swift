import Testing
@testable import SubscriptionDomain

@Test func SubscriptionDomainLinks() { #expect(String(describing: SubscriptionDomainModule.self).contains("SubscriptionDomain")) }
