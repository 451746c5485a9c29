@_exported import SubstatusJSON

/// A protobuf enum with a Swift value for each declared value and `UNRECOGNIZED` for any other
/// number, so that values from newer peers survive a decode/encode round trip.
public protocol ProtobufEnum: Sendable, Hashable, RawRepresentable, CaseIterable where RawValue == Int32 {
  /// The value for a wire number; numbers not declared map to `UNRECOGNIZED`.
  init(rawValue: Int32)
  /// The declared name (`ELIGIBILITY_REASON_NEW_CUSTOMER`), or `nil` for an unrecognized number.
  var protoName: String? { get }
  /// The value with a declared name, as proto3 JSON accepts it.
  init?(protoName: String)
}

extension ProtobufEnum {
  /// The proto3 JSON form: the declared name, or the number when unrecognized.
  public var jsonValue: JSONValue {
    if let name = protoName { return .string(name) }
    return .integer(rawValue)
  }
}

/// Describes one RPC method of a service in `Protos/`.
public struct ProtoMethodDescriptor<Input: ProtobufMessage, Output: ProtobufMessage>: Sendable, Hashable {
  /// The fully qualified service name, such as `substatus.v1.EligibilityService`.
  public let service: String
  /// The method name, such as `CheckEligibility`.
  public let method: String
  /// Whether the client sends a stream of messages.
  public let clientStreaming: Bool
  /// Whether the server sends a stream of messages.
  public let serverStreaming: Bool
  /// The method's `idempotency_level` option (`.idempotencyUnknown` when it declares none).
  public let idempotencyLevel: ProtoIdempotencyLevel

  /// Creates a descriptor.
  public init(
    service: String, method: String, clientStreaming: Bool = false, serverStreaming: Bool = false,
    idempotencyLevel: ProtoIdempotencyLevel = .idempotencyUnknown
  ) {
    self.service = service
    self.method = method
    self.clientStreaming = clientStreaming
    self.serverStreaming = serverStreaming
    self.idempotencyLevel = idempotencyLevel
  }

  /// The HTTP/2 `:path` of the method: `/substatus.v1.EligibilityService/CheckEligibility`.
  public var path: String { "/\(service)/\(method)" }
}

/// A method's `idempotency_level` option (`google.protobuf.MethodOptions.IdempotencyLevel`), as an
/// `rpc` of `Protos/` declares it: whether calling it again can change anything.
public enum ProtoIdempotencyLevel: Int32, Sendable, Hashable {
  /// Declared neither: a repeat may act twice.
  case idempotencyUnknown = 0
  /// `NO_SIDE_EFFECTS`: a read, changing nothing (HTTP's safe methods; Connect may send it as GET).
  case noSideEffects = 1
  /// `IDEMPOTENT`: it may change state, but a repeat changes nothing more.
  case idempotent = 2

  /// Whether a repeat is harmless: `.noSideEffects` or `.idempotent`.
  public var isIdempotent: Bool { self != .idempotencyUnknown }
}

/// A `.proto` file compiled into this module, as server reflection serves it.
public struct ProtoFileDescriptor: Sendable, Hashable {
  /// The file's path relative to its import root, such as `substatus/v1/common.proto`.
  public let name: String
  /// The protobuf package.
  public let package: String
  /// The files it imports.
  public let dependencies: [String]
  /// The fully qualified names of the services, messages and enums it declares (nested ones too).
  public let symbols: [String]
  /// The fully qualified names of its services.
  public let services: [String]
  /// The serialized `google.protobuf.FileDescriptorProto`.
  public let serializedDescriptor: [UInt8]
}
