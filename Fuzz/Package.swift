// swift-tools-version:6.0
// The libFuzzer executables of substatus: one per `FuzzTarget` (Fuzz/Targets, a target of the main
// package). Built only by scripts/fuzz, with `-sanitize=fuzzer,address`; `make test` never builds
// this package (it runs the corpora through the same targets without sanitizers instead).
import PackageDescription

let targets = ["wire", "protojson", "json", "apple", "deframer", "notification", "signed", "notificationv2"]

let package = Package(
  name: "substatus-fuzz",
  products: targets.map { .executable(name: "fuzz-\($0)", targets: ["fuzz-\($0)"]) },
  dependencies: [.package(name: "substatus", path: "..")],
  targets: [.target(name: "CLibFuzzer", path: "Entries/CLibFuzzer")]
    + targets.map {
      .executableTarget(
        name: "fuzz-\($0)",
        dependencies: ["CLibFuzzer", .product(name: "SubstatusFuzzTargets", package: "substatus")],
        path: "Entries/\($0)")
    }
)
