import Foundation
import SubstatusFuzzTargets
import Testing

/// The repository root, found from this file's path.
let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
  .deletingLastPathComponent()
  .deletingLastPathComponent()

/// Runs every checked-in corpus input (seeds, inputs libFuzzer found, crash reproducers) through its
/// fuzz target, without sanitizers: a regression run of `make fuzz` that costs seconds. Serialized:
/// the notification targets block their (cooperative) thread on a semaphore while the service
/// answers, and two of them at once on a 2-core pool would leave no thread to answer.
@Suite(.serialized) struct CorpusRegressionTests {
  @Test(arguments: FuzzTarget.allCases)
  func corpusInputsKeepTheirProperties(_ target: FuzzTarget) throws {
    let directory = packageRoot.appendingPathComponent("Fuzz/Corpus/\(target.rawValue)")
    let names = try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
    #expect(
      names.count >= 5, "Fuzz/Corpus/\(target.rawValue) has too few inputs; run scripts/fuzz-seeds")
    for name in names {
      let input = try [UInt8](Data(contentsOf: directory.appendingPathComponent(name)))
      if let violation = target.run(input) {
        Issue.record("Fuzz/Corpus/\(target.rawValue)/\(name): \(violation)")
      }
    }
  }
}
