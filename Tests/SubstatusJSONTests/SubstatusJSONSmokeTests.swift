import Testing
@testable import SubstatusJSON

@Test func SubstatusJSONLinks() { #expect(String(describing: SubstatusJSONModule.self).contains("SubstatusJSON")) }
