import Foundation
import ProtoGen
import Testing

/// ProtoGen's service code (`ServiceGenerator`) for a service with every kind of method
/// (`Fixtures/services/kinds.proto`), compared with the checked-in expected output
/// (`Fixtures/services/kinds.grpc.swift.expected`; after a deliberate change of the generator, copy
/// the actual output the failure names over it and review the diff).
@Suite struct ServiceGeneratorTests {
  static let fixtures = packageRoot.appendingPathComponent("Tests/SubstatusWireTests/Fixtures/services")

  /// The descriptor set of `kinds.proto`, compiled by protoc.
  func kinds() async throws -> ProtoFileSet {
    let out = try makeTemporaryDirectory()
    defer { try? FileManager.default.removeItem(at: out) }
    let set = out.appendingPathComponent("kinds.pb").path
    try await run(
      "/usr/bin/protoc",
      ["-I", Self.fixtures.path, "--include_imports", "--include_source_info", "--descriptor_set_out=\(set)", "kinds.proto"])
    return try ProtoFileSet(serializedBytes: [UInt8](try Data(contentsOf: URL(fileURLWithPath: set))))
  }

  @Test func everyKindOfMethodMatchesTheExpectedOutput() async throws {
    let set = try await kinds()
    let file = try #require(set.files.first { $0.name == "kinds.proto" })
    let generated = try #require(ServiceGenerator(set: set).generate(file))
    let expectedURL = Self.fixtures.appendingPathComponent("kinds.grpc.swift.expected")
    let expected = try String(contentsOf: expectedURL, encoding: .utf8)
    if generated != expected {
      let actual = FileManager.default.temporaryDirectory.appendingPathComponent("kinds.grpc.swift.actual")
      try generated.write(to: actual, atomically: true, encoding: .utf8)
      Issue.record("the generated service code differs from \(expectedURL.path); actual output in \(actual.path)")
    }
  }

  @Test func eachKindGetsItsServerMethodRegistrationAndClient() async throws {
    let set = try await kinds()
    let file = try #require(set.files.first { $0.name == "kinds.proto" })
    let code = try #require(ServiceGenerator(set: set).generate(file))
    // Server protocol: one typed requirement per RPC.
    #expect(code.contains("func unary(_ request: Kinds_V1_Ping, _ context: ServerContext) async throws -> Kinds_V1_Pong"))
    #expect(code.contains("_ request: Kinds_V1_Ping, _ responses: RPCMessageWriter<Kinds_V1_Pong>, _ context: ServerContext"))
    #expect(code.contains("_ requests: RPCMessageSequence<Kinds_V1_Ping>, _ context: ServerContext\n    ) async throws -> Kinds_V1_Pong"))
    #expect(code.contains("_ requests: RPCMessageSequence<Kinds_V1_Ping>, _ responses: RPCMessageWriter<Kinds_V1_Pong>,"))
    // Registration: the typed router call of each kind, with the caller's execution per path.
    for (call, method) in [
      ("registerUnary", "unary"), ("registerServerStreaming", "serverStream"),
      ("registerClientStreaming", "clientStream"), ("registerBidirectionalStreaming", "bidi"),
    ] {
      #expect(code.contains("router.\(call)(\n      method: Kinds_V1_Kinds.\(method).path"))
      #expect(code.contains("execution: execution(Kinds_V1_Kinds.\(method).path)"))
    }
    // Client: unary and server streaming; no client for client or bidirectional streams.
    #expect(code.contains("public func unary(\n      _ request: Kinds_V1_Ping, metadata: Metadata = [:]"))
    #expect(code.contains("public func serverStream(\n      _ request: Kinds_V1_Ping, metadata: Metadata = [:]"))
    #expect(!code.contains("public func clientStream("))
    #expect(!code.contains("public func bidi("))
  }

  @Test func aFileWithoutServicesGeneratesNothing() async throws {
    let set = try await kinds()
    var file = try #require(set.files.first { $0.name == "kinds.proto" })
    file.services = []
    #expect(ServiceGenerator(set: set).generate(file) == nil)
  }
}
