import Foundation
import Testing
@testable import SubstatusWire

/// Every message type against an independent encoder (Python's protobuf on the same .proto files),
/// in both directions, binary and proto3 JSON.
@Suite struct InteropTests {
  @Test func everyMessageRoundTripsAgainstPythonProtobuf() async throws {
    let python = try testPython()
    let script = packageRoot.appendingPathComponent("Tests/SubstatusWireTests/Fixtures/proto_interop.py").path
    let protos = packageRoot.appendingPathComponent("Protos").path
    let dir = try makeTemporaryDirectory()
    defer { try? FileManager.default.removeItem(at: dir) }
    let generated = dir.appendingPathComponent("python.jsonl").path
    let reencoded = dir.appendingPathComponent("swift.jsonl").path
    try await run(python, [script, "generate", protos, generated])

    var lines: [String] = []
    var seenTypes = Set<String>()
    for line in try String(contentsOfFile: generated, encoding: .utf8).split(separator: "\n") {
      let record = try JSONValue(parsing: String(line))
      let name = try #require(record["type"]?.stringValue)
      let type = try #require(ProtoFiles.messageTypes[name], "no Swift type for \(name)")
      seenTypes.insert(name)
      let binary = try #require(Data(base64Encoded: record["binary"]?.stringValue ?? ""))
      let pythonJSON = try JSONValue(parsing: try #require(record["json"]?.stringValue))

      let fromBinary = try type.init(serializedBytes: [UInt8](binary))
      // Swift's JSON of the decoded value equals Python's JSON of the original.
      #expect(
        canonical(fromBinary.jsonValue()) == canonical(pythonJSON),
        "\(name): swift \(fromBinary.jsonValue().serialized()) python \(pythonJSON.serialized())")
      // Decoding Python's JSON gives the same value as decoding Python's bytes.
      let fromJSON = try type.init(jsonValue: pythonJSON)
      #expect(isEqual(fromJSON, fromBinary), "\(name): JSON and binary decode differ")
      // Swift's own bytes decode back to the same value.
      let bytes = fromBinary.serializedBytes()
      #expect(isEqual(try type.init(serializedBytes: bytes), fromBinary), "\(name): Swift round trip differs")

      let out: JSONObject = [
        "type": .string(name), "binary": .string(Data(bytes).base64EncodedString()),
        "json": .string(fromBinary.jsonValue().serialized()),
      ]
      lines.append(JSONValue.object(out).serialized())
    }
    // Every type of Protos/ was exercised (the imported well-known types only inside others).
    #expect(Set(ProtoFiles.messageTypes.keys).subtracting(seenTypes).sorted() == [
      "google.protobuf.Any", "google.protobuf.Duration",
    ])
    try (lines.joined(separator: "\n") + "\n").write(toFile: reencoded, atomically: true, encoding: .utf8)
    // Python parses what Swift wrote, binary and JSON, and compares with its originals.
    try await run(python, [script, "verify", protos, generated, reencoded])
  }

  func isEqual(_ a: any ProtobufJSONMessage, _ b: any ProtobufJSONMessage) -> Bool {
    func open<M: ProtobufJSONMessage>(_ a: M) -> Bool { (b as? M) == a }
    return open(a)
  }
}

/// A JSON value with object members sorted and numbers compared by value, so that two encoders'
/// equivalent output compares equal.
func canonical(_ value: JSONValue) -> JSONValue {
  switch value {
  case .object(let o):
    return .object(JSONObject(o.members.sorted { $0.key < $1.key }.map { (key: $0.key, value: canonical($0.value)) }))
  case .array(let a):
    return .array(a.map(canonical))
  case .number(let text):
    if let i = Int64(text) { return .number(String(i)) }
    if let d = Double(text) {
      // Floats: Python prints the shortest text that round-trips the 32-bit value; compare as Float
      // when the double texts differ only below float precision.
      return .number(String(describing: Float(d)) == text ? text : String(describing: Float(d)))
    }
    return value
  default:
    return value
  }
}
