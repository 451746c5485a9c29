import Testing
@testable import HTTPServer

@Test func HTTPServerLinks() { #expect(String(describing: HTTPServerModule.self).contains("HTTPServer")) }
