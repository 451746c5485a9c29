import Testing
@testable import RPCHTTP2Transport

@Test func RPCHTTP2TransportLinks() { #expect(String(describing: RPCHTTP2TransportModule.self).contains("RPCHTTP2Transport")) }
