import CLibFuzzer
import SubstatusFuzzTargets

/// The `apple` fuzz executable's `main` (SwiftPM aliases `main` to `fuzz_apple_main`): hands the
/// command line to libFuzzer with the target as its callback. Options as for any libFuzzer binary.
@_cdecl("fuzz_apple_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?)
  -> CInt
{
  var argc = argc
  var argv = argv
  return LLVMFuzzerRunDriver(&argc, &argv) { data, size in
    let input = size == 0 ? [] : Array(UnsafeBufferPointer(start: data, count: size))
    if let violation = FuzzTarget.apple.run(input) { fatalError("fuzz-apple: \(violation)") }
    return 0
  }
}
