/// The parts of a protobuf `FileDescriptorSet` that code generation needs, as plain Swift values.
public struct ProtoFileSet: Sendable {
  /// Every file in the set, dependencies first (as `protoc --include_imports` writes them).
  public var files: [ProtoFile]
}

/// One `.proto` file.
public struct ProtoFile: Sendable {
  /// The path relative to the import root, such as `substatus/v1/common.proto`.
  public var name: String
  /// The protobuf package, such as `substatus.v1`.
  public var package: String
  /// The files it imports.
  public var dependencies: [String]
  /// Top-level messages.
  public var messages: [ProtoMessage]
  /// Top-level enums.
  public var enums: [ProtoEnum]
  /// Services.
  public var services: [ProtoService]
  /// Extensions declared at the top level (custom options, such as `substatus.v1.required_role`).
  public var extensions: [ProtoExtension] = []
  /// The serialized `FileDescriptorProto` without source info, as served by reflection.
  public var serializedDescriptor: [UInt8]
}

/// A message type.
public struct ProtoMessage: Sendable {
  /// The name as written in the file.
  public var name: String
  /// The fully qualified name without a leading dot, such as `substatus.v1.Product`.
  public var fullName: String
  /// Fields in declaration order.
  public var fields: [ProtoField]
  /// Names of the `oneof`s that are not synthetic (proto3 `optional`).
  public var oneofs: [String]
  /// Nested messages.
  public var messages: [ProtoMessage]
  /// Nested enums.
  public var enums: [ProtoEnum]
  /// Whether this is the synthetic entry type of a `map` field.
  public var isMapEntry: Bool
  /// The leading comment.
  public var comment: String
}

/// A field of a message.
public struct ProtoField: Sendable {
  /// The field kinds of `descriptor.proto` (`FieldDescriptorProto.Type`).
  public enum Kind: Int32, Sendable {
    case double = 1, float, int64, uint64, int32, fixed64, fixed32, bool, string, group, message,
      bytes, uint32, enumeration, sfixed32, sfixed64, sint32, sint64
  }
  /// The name as written, lower_snake_case.
  public var name: String
  /// The field number.
  public var number: Int32
  /// The kind.
  public var kind: Kind
  /// Whether the field is `repeated` (maps included).
  public var isRepeated: Bool
  /// For messages and enums: the fully qualified type name without a leading dot.
  public var typeName: String
  /// The proto3 JSON name (lowerCamelCase unless `json_name` is set).
  public var jsonName: String
  /// The index into the message's real `oneof`s when the field belongs to one.
  public var oneofIndex: Int?
  /// The leading comment.
  public var comment: String
}

/// An enum type.
public struct ProtoEnum: Sendable {
  /// The name as written.
  public var name: String
  /// The fully qualified name without a leading dot.
  public var fullName: String
  /// Values in declaration order: name, number and leading comment.
  public var values: [(name: String, number: Int32, comment: String)]
  /// The leading comment.
  public var comment: String
}

/// A service.
public struct ProtoService: Sendable {
  /// The name as written.
  public var name: String
  /// The fully qualified name without a leading dot, such as `substatus.v1.EligibilityService`.
  public var fullName: String
  /// The methods in declaration order.
  public var methods: [ProtoMethod]
  /// The leading comment.
  public var comment: String
}

/// A method of a service.
public struct ProtoMethod: Sendable {
  /// The name, such as `CheckEligibility`.
  public var name: String
  /// The fully qualified input message name without a leading dot.
  public var inputType: String
  /// The fully qualified output message name without a leading dot.
  public var outputType: String
  /// Whether the client sends a stream.
  public var clientStreaming: Bool
  /// Whether the server sends a stream.
  public var serverStreaming: Bool
  /// The leading comment.
  public var comment: String
  /// The `idempotency_level` option: 0 `IDEMPOTENCY_UNKNOWN` (none declared), 1
  /// `NO_SIDE_EFFECTS`, 2 `IDEMPOTENT`.
  public var idempotencyLevel: Int32 = 0
  /// The custom options of the method with a varint value (enums, integers, booleans), by field
  /// number: the `MethodOptions` fields that descriptor.proto does not declare.
  public var customVarintOptions: [Int32: UInt64] = [:]
}

/// An extension field, as a custom option is declared (`extend google.protobuf.MethodOptions`).
public struct ProtoExtension: Sendable {
  /// The name as written, such as `required_role`.
  public var name: String
  /// The fully qualified name without a leading dot, such as `substatus.v1.required_role`.
  public var fullName: String
  /// The field number.
  public var number: Int32
  /// The message it extends, without a leading dot, such as `google.protobuf.MethodOptions`.
  public var extendee: String
  /// The kind.
  public var kind: ProtoField.Kind
  /// For messages and enums: the fully qualified type name without a leading dot.
  public var typeName: String
  /// The leading comment.
  public var comment: String
}

/// A descriptor set that cannot be read.
public struct ProtoGenError: Error, CustomStringConvertible {
  /// What is wrong.
  public var description: String
  /// Creates an error.
  public init(_ description: String) { self.description = description }
}
