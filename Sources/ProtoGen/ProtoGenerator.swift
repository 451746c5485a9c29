import Foundation

/// Runs the whole generation: Swift files for `SubstatusWire/Generated`, the service code for
/// `SubstatusServiceAPI/Generated` and the C table files for `CSubstatusProto`, as (relative path,
/// text) pairs.
public enum ProtoGenerator {
  /// The generated files.
  public struct Outputs {
    /// Swift files, relative to `Sources/SubstatusWire/Generated`.
    public var swift: [(String, String)]
    /// Service files (server protocols, registration, clients), relative to
    /// `Sources/SubstatusServiceAPI/Generated`.
    public var services: [(String, String)]
    /// C files, relative to `Sources/CSubstatusProto`.
    public var c: [(String, String)]
  }

  /// Generates every output from a descriptor set and the protoc-c headers.
  /// - Parameters:
  ///   - descriptorSet: `protoc --include_imports --include_source_info --descriptor_set_out` output.
  ///   - cHeadersDirectory: The include directory holding protoc-c's `*.pb-c.h` files.
  public static func run(descriptorSet: [UInt8], cHeadersDirectory: String) throws -> Outputs {
    let set = try ProtoFileSet(serializedBytes: descriptorSet)
    let generator = SwiftGenerator(set: set)
    try generator.validateMethodOptions()
    var swift: [(String, String)] = []
    for file in set.files where !SwiftGenerator.optionsOnlyFiles.contains(file.name)
      && (!file.name.hasPrefix("google/protobuf/") || !file.messages.isEmpty)
    {
      swift.append((SwiftGenerator.swiftFileName(file.name), generator.generate(file)))
    }
    swift.append(("ProtoFiles.pb.swift", generator.generateFileTable()))
    let serviceGenerator = ServiceGenerator(set: set)
    let services = set.files.compactMap { file in
      serviceGenerator.generate(file).map { (ServiceGenerator.swiftFileName(file.name), $0) }
    }

    var headers: [(path: String, text: String)] = []
    let fm = FileManager.default
    guard let walker = fm.enumerator(atPath: cHeadersDirectory) else {
      throw ProtoGenError("cannot read \(cHeadersDirectory)")
    }
    while let relative = walker.nextObject() as? String {
      guard relative.hasSuffix(".pb-c.h") else { continue }
      headers.append((relative, try String(contentsOfFile: cHeadersDirectory + "/" + relative, encoding: .utf8)))
    }
    let table = CTableGenerator(headers: headers)
    let c = [
      ("include/csubstatus_descriptor_table.h", table.header()),
      ("include/csubstatus_proto.h", table.umbrellaHeader()),
      ("include/module.modulemap", "module CSubstatusProto {\n  header \"csubstatus_proto.h\"\n  export *\n}\n"),
      ("csubstatus_descriptor_table.c", table.source(files: set.files)),
    ]
    return Outputs(swift: swift, services: services, c: c)
  }
}
