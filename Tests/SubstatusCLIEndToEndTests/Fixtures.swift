import Foundation

/// The path of a test fixture.
func fixture(_ name: String) -> String {
  Bundle.module.url(forResource: "Fixtures/\(name)", withExtension: nil)?.path
    ?? "missing-fixture-\(name)"
}
