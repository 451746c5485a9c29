import Foundation
import Testing
@testable import SubstatusWire

/// The checked-in generated code must be what scripts/generate-protos makes from Protos/ now.
@Suite struct GeneratedCodeTests {
  /// The generated trees compared.
  static let generatedPaths = [
    "Sources/CSubstatusProto", "Sources/CProtobufDescriptor/google",
    "Sources/CProtobufDescriptor/include/google", "Sources/SubstatusWire/Generated",
    "Sources/SubstatusServiceAPI/Generated",
  ]

  @Test func checkedInCodeIsNotStale() async throws {
    let binDir = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    let candidates = [binDir, binDir.deletingLastPathComponent()].map { $0.appendingPathComponent("substatus-protogen").path }
    let generator = try #require(
      candidates.first(where: FileManager.default.isExecutableFile(atPath:)),
      "substatus-protogen is not built next to the tests (swift build --build-tests builds it)")
    let out = try makeTemporaryDirectory()
    defer { try? FileManager.default.removeItem(at: out) }
    try await run(packageRoot.appendingPathComponent("scripts/generate-protos").path, [out.path], environment: ["PROTOGEN": generator])
    var stale: [String] = []
    for path in Self.generatedPaths {
      let fresh = try files(under: out.appendingPathComponent(path))
      let checkedIn = try files(under: packageRoot.appendingPathComponent(path))
      for name in Set(fresh.keys).union(checkedIn.keys).sorted() where fresh[name] != checkedIn[name] {
        stale.append("\(path)/\(name)")
      }
    }
    #expect(stale.isEmpty, "generated code is stale, run `make protos`: \(stale)")
  }

  func files(under root: URL) throws -> [String: Data] {
    var out: [String: Data] = [:]
    guard let walker = FileManager.default.enumerator(atPath: root.path) else { return out }
    while let relative = walker.nextObject() as? String {
      var isDirectory: ObjCBool = false
      let full = root.appendingPathComponent(relative)
      if FileManager.default.fileExists(atPath: full.path, isDirectory: &isDirectory), !isDirectory.boolValue {
        out[relative] = try Data(contentsOf: full)
      }
    }
    return out
  }
}
