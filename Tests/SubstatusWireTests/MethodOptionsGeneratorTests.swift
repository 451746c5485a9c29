import Foundation
import ProtoGen
import Testing
import SubstatusWire

/// ProtoGen's reading of method options (`Fixtures/options/*.proto`, which import
/// `Protos/substatus/v1/options.proto`): `idempotency_level` and `(substatus.v1.required_role)`
/// reach the generated descriptors and tables, and a method of substatus.v1 without a role fails
/// generation.
@Suite struct MethodOptionsGeneratorTests {
  static let fixtures = packageRoot.appendingPathComponent("Tests/SubstatusWireTests/Fixtures/options")

  /// The descriptor set of fixture files, compiled by protoc against Protos/.
  func compile(_ files: [String]) async throws -> ProtoFileSet {
    let out = try makeTemporaryDirectory()
    defer { try? FileManager.default.removeItem(at: out) }
    let set = out.appendingPathComponent("set.pb").path
    try await run(
      "/usr/bin/protoc",
      ["-I", Self.fixtures.path, "-I", packageRoot.appendingPathComponent("Protos").path, "-I", "/usr/include",
       "--include_imports", "--include_source_info", "--descriptor_set_out=\(set)"] + files)
    return try ProtoFileSet(serializedBytes: [UInt8](try Data(contentsOf: URL(fileURLWithPath: set))))
  }

  func method(_ set: ProtoFileSet, _ service: String, _ name: String) throws -> ProtoMethod {
    let svc = try #require(set.files.flatMap(\.services).first { $0.name == service })
    return try #require(svc.methods.first { $0.name == name })
  }

  @Test func theOptionsAreRead() async throws {
    let set = try await compile(["roles.proto"])
    let role = try #require(set.files.flatMap(\.extensions).first { $0.fullName == "substatus.v1.required_role" })
    #expect(role.extendee == "google.protobuf.MethodOptions")
    #expect(role.typeName == "substatus.v1.RequiredRole")
    let declared = try method(set, "Probes", "Declared")
    #expect(declared.idempotencyLevel == 2)
    #expect(declared.customVarintOptions[role.number] == 2)  // REQUIRED_ROLE_INGEST
    let unmarked = try method(set, "Probes", "Unmarked")
    #expect(unmarked.idempotencyLevel == 1)
    #expect(unmarked.customVarintOptions.isEmpty)
    #expect(try method(set, "Probes", "RoleOnly").idempotencyLevel == 0)
  }

  @Test("a method of substatus.v1 without a role, or with the zero value, fails generation")
  func missingRoleFails() async throws {
    let set = try await compile(["roles.proto"])
    do {
      try SwiftGenerator(set: set).validateMethodOptions()
      Issue.record("generation accepted methods without a role")
    } catch let error as ProtoGenError {
      #expect(error.description.contains("substatus.v1.Probes.Unmarked declares no (substatus.v1.required_role)"))
      #expect(error.description.contains("substatus.v1.Probes.Unspecified: (substatus.v1.required_role) = 0 is not a role"))
      #expect(!error.description.contains("Probes.Declared"))
      #expect(!error.description.contains("Probes.RoleOnly"))
    }
  }

  @Test("the set of Protos/ passes, and so does a service of another package without roles")
  func declaredRolesPass() async throws {
    let protos = packageRoot.appendingPathComponent("Protos")
    let names = try FileManager.default.subpathsOfDirectory(atPath: protos.path).filter { $0.hasSuffix(".proto") }.sorted()
    let out = try makeTemporaryDirectory()
    defer { try? FileManager.default.removeItem(at: out) }
    let setPath = out.appendingPathComponent("set.pb").path
    try await run(
      "/usr/bin/protoc",
      ["-I", protos.path, "-I", "/usr/include", "--include_imports", "--descriptor_set_out=\(setPath)"] + names)
    let set = try ProtoFileSet(serializedBytes: [UInt8](try Data(contentsOf: URL(fileURLWithPath: setPath))))
    try SwiftGenerator(set: set).validateMethodOptions()
    try SwiftGenerator(set: try await compile(["elsewhere.proto"])).validateMethodOptions()
  }

  @Test func theGeneratedCodeCarriesTheOptions() async throws {
    let set = try await compile(["elsewhere.proto"])
    let generator = SwiftGenerator(set: set)
    let file = try #require(set.files.first { $0.name == "elsewhere.proto" })
    let code = generator.generate(file)
    #expect(code.contains("method: \"WithRole\", clientStreaming: false, serverStreaming: false,\n    idempotencyLevel: .noSideEffects)"))
    #expect(code.contains("method: \"Plain\", clientStreaming: false, serverStreaming: false)\n"))
    #expect(code.contains("public static let requiredRoles: [String: Substatus_V1_RequiredRole] = [\n    \"/elsewhere.v1.Other/WithRole\": .read,\n  ]"))
    let table = generator.generateFileTable()
    #expect(table.contains("\"/elsewhere.v1.Other/WithRole\": .noSideEffects,"))
    #expect(!table.contains("/elsewhere.v1.Other/Plain"))
    // descriptor.proto is served by reflection but has no Swift types.
    #expect(table.contains("name: \"google/protobuf/descriptor.proto\""))
    #expect(!table.contains("\"google.protobuf.FileDescriptorProto\": "))
  }

  @Test("the checked-in tables hold what Protos/ declares")
  func checkedInTables() {
    #expect(Substatus_V1_StatusService.getStatus.idempotencyLevel == .noSideEffects)
    #expect(Substatus_V1_IngestService.submitReceipt.idempotencyLevel == .idempotent)
    #expect(Substatus_V1_TenantService.createTenant.idempotencyLevel == .idempotencyUnknown)
    #expect(ProtoMethodOptions.idempotencyLevels[Substatus_V1_StatusService.getStatus.path] == .noSideEffects)
    #expect(ProtoMethodOptions.idempotencyLevels[Substatus_V1_TenantService.createTenant.path] == nil)
    #expect(ProtoMethodOptions.requiredRoles[Substatus_V1_AdminService.getCallerApiKey.path] == .anyKey)
    #expect(Substatus_V1_EventService.requiredRoles[Substatus_V1_EventService.watchEvents.path] == .read)
    #expect(ProtoMethodOptions.requiredRoles["/grpc.health.v1.Health/Check"] == nil)
  }
}
