/// A protocol buffer message with a Swift value representation.
///
/// Every message in `Protos/` has a generated value type conforming to this protocol. Encoding and
/// decoding go through protobuf-c; Swift copies values in and out of the C structures, so no C type
/// ever appears in the public API.
///
/// ```swift
/// var product = Substatus_V1_Product()
/// product.productID = "com.example.pro.monthly"
/// let bytes = product.serializedBytes()
/// let decoded = try Substatus_V1_Product(serializedBytes: bytes)
/// ```
public protocol ProtobufMessage: Sendable, Hashable {
  /// The fully qualified protobuf name, such as `substatus.v1.Product`.
  static var protoMessageName: String { get }

  /// A message with every field at its default value.
  init()

  /// Decodes a message from the protobuf binary wire format.
  ///
  /// - Parameter serializedBytes: The encoded message.
  /// - Throws: ``WireError`` when the bytes are not a valid encoding of this message.
  init(serializedBytes: [UInt8]) throws(WireError)

  /// Encodes the message in the protobuf binary wire format.
  func serializedBytes() -> [UInt8]
}

/// A failure to decode protobuf or gRPC-framed bytes.
public struct WireError: Error, Hashable, Sendable, CustomStringConvertible {
  /// What kind of failure this is.
  public struct Code: Hashable, Sendable, CustomStringConvertible {
    private enum Wrapped: Hashable, Sendable {
      case malformedMessage, invalidUTF8, embeddedNUL, malformedFrame, messageTooLarge, compressedMessage, invalidJSON
    }
    private let wrapped: Wrapped
    private init(_ wrapped: Wrapped) { self.wrapped = wrapped }

    /// The bytes are not a valid protobuf encoding of the message.
    public static let malformedMessage = Code(.malformedMessage)
    /// A `string` field holds bytes that are not UTF-8.
    public static let invalidUTF8 = Code(.invalidUTF8)
    /// A `string` field holds a NUL byte, which protobuf-c's C strings would cut.
    public static let embeddedNUL = Code(.embeddedNUL)
    /// A gRPC length-prefixed frame is malformed or truncated.
    public static let malformedFrame = Code(.malformedFrame)
    /// A gRPC frame announces a message larger than the configured limit.
    public static let messageTooLarge = Code(.messageTooLarge)
    /// A gRPC frame carries a compressed message, and no compression is negotiated.
    public static let compressedMessage = Code(.compressedMessage)
    /// A proto3 JSON document does not match the message.
    public static let invalidJSON = Code(.invalidJSON)

    public var description: String {
      switch wrapped {
      case .malformedMessage: "malformed message"
      case .invalidUTF8: "invalid UTF-8"
      case .embeddedNUL: "embedded NUL"
      case .malformedFrame: "malformed frame"
      case .messageTooLarge: "message too large"
      case .compressedMessage: "compressed message"
      case .invalidJSON: "invalid JSON"
      }
    }
  }

  /// What kind of failure this is.
  public var code: Code
  /// A human-readable explanation that names the message or field concerned.
  public var message: String
  /// For a failure of one field (``Code-swift.struct/embeddedNUL``,
  /// ``Code-swift.struct/invalidUTF8``): the field and what is wrong with it, for a
  /// `google.rpc.BadRequest`.
  public var fieldViolation: FieldViolation?

  /// One field's failure.
  public struct FieldViolation: Hashable, Sendable {
    /// The field's path in proto field-path form, such as `queries[2].user_id`.
    public var field: String
    /// What is wrong, without the field's name, such as `is not valid UTF-8`.
    public var description: String

    /// Creates a field violation.
    public init(field: String, description: String) {
      self.field = field
      self.description = description
    }
  }

  /// Creates an error.
  public init(code: Code, message: String, fieldViolation: FieldViolation? = nil) {
    self.code = code
    self.message = message
    self.fieldViolation = fieldViolation
  }

  public var description: String { "\(code): \(message)" }
}
