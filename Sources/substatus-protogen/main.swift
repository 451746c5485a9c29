// substatus-protogen: generates SubstatusWire's Swift code, SubstatusServiceAPI's service code and
// CSubstatusProto's descriptor table
// from a descriptor set. Run through scripts/generate-protos, which prepares its inputs.
import Foundation
import ProtoGen

func fail(_ message: String) -> Never {
  FileHandle.standardError.write(Data("substatus-protogen: \(message)\n".utf8))
  exit(2)
}

var options: [String: String] = [:]
var arguments = CommandLine.arguments.dropFirst()
while let flag = arguments.popFirst() {
  guard ["--descriptor-set", "--c-headers", "--swift-out", "--service-out", "--c-out"].contains(flag), let value = arguments.popFirst() else {
    fail("usage: substatus-protogen --descriptor-set FILE --c-headers DIR --swift-out DIR --service-out DIR --c-out DIR")
  }
  options[flag] = value
}
guard let setPath = options["--descriptor-set"], let headersDir = options["--c-headers"],
  let swiftOut = options["--swift-out"], let serviceOut = options["--service-out"], let cOut = options["--c-out"]
else { fail("usage: substatus-protogen --descriptor-set FILE --c-headers DIR --swift-out DIR --service-out DIR --c-out DIR") }

do {
  let outputs = try ProtoGenerator.run(
    descriptorSet: [UInt8](try Data(contentsOf: URL(fileURLWithPath: setPath))),
    cHeadersDirectory: headersDir)
  let fm = FileManager.default
  for (directory, files) in [(swiftOut, outputs.swift), (serviceOut, outputs.services)] {
    for (relative, text) in files {
      try fm.createDirectory(atPath: directory, withIntermediateDirectories: true)
      try text.write(toFile: directory + "/" + relative, atomically: true, encoding: .utf8)
    }
  }
  for (relative, text) in outputs.c {
    let path = cOut + "/" + relative
    try fm.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
    try text.write(toFile: path, atomically: true, encoding: .utf8)
  }
} catch {
  fail("\(error)")
}
