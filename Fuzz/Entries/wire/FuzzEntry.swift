import CLibFuzzer
import SubstatusFuzzTargets

/// The `wire` fuzz executable's `main` (SwiftPM aliases `main` to `fuzz_wire_main`): hands the
/// command line to libFuzzer with the target as its callback. Options as for any libFuzzer binary.
@_cdecl("fuzz_wire_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?)
  -> CInt
{
  var argc = argc
  var argv = argv
  return LLVMFuzzerRunDriver(&argc, &argv) { data, size in
    let input = size == 0 ? [] : Array(UnsafeBufferPointer(start: data, count: size))
    if let violation = FuzzTarget.wire.run(input) { fatalError("fuzz-wire: \(violation)") }
    return 0
  }
}
