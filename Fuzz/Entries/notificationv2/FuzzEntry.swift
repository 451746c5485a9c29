import CLibFuzzer
import SubstatusFuzzTargets

/// The `notificationv2` fuzz executable's `main` (SwiftPM aliases `main` to `fuzz_notificationv2_main`): hands the
/// command line to libFuzzer with the target as its callback. Options as for any libFuzzer binary.
@_cdecl("fuzz_notificationv2_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?)
  -> CInt
{
  var argc = argc
  var argv = argv
  return LLVMFuzzerRunDriver(&argc, &argv) { data, size in
    let input = size == 0 ? [] : Array(UnsafeBufferPointer(start: data, count: size))
    if let violation = FuzzTarget.notificationv2.run(input) {
      fatalError("fuzz-notificationv2: \(violation)")
    }
    return 0
  }
}
