import Testing
@testable import RPCCore

@Test func RPCCoreLinks() { #expect(String(describing: RPCCoreModule.self).contains("RPCCore")) }
