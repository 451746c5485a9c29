import CLibFuzzer
import SubstatusFuzzTargets

/// The `signed` fuzz executable's `main` (SwiftPM aliases `main` to `fuzz_signed_main`): hands the
/// command line to libFuzzer with the target as its callback. Options as for any libFuzzer binary.
@_cdecl("fuzz_signed_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?)
  -> CInt
{
  var argc = argc
  var argv = argv
  return LLVMFuzzerRunDriver(&argc, &argv) { data, size in
    let input = size == 0 ? [] : Array(UnsafeBufferPointer(start: data, count: size))
    if let violation = FuzzTarget.signed.run(input) {
      fatalError("fuzz-signed: \(violation)")
    }
    return 0
  }
}
