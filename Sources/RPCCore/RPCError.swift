import SubstatusWire

/// An error that ends an RPC with a gRPC status other than `OK`.
///
/// Handlers throw it to choose the status the caller sees; any other error a handler throws goes
/// out as ``Code-swift.struct/unknown`` with a generic message, unless it adopts
/// ``RPCErrorConvertible``.
///
/// ```swift
/// throw RPCError(code: .invalidArgument, message: "user_id must not be empty")
/// ```
public struct RPCError: Error, Sendable, CustomStringConvertible {
  /// A gRPC status code.
  ///
  /// A struct over a private enum, so adding a code never breaks a caller's `switch`.
  public struct Code: Hashable, Sendable, CustomStringConvertible {
    private enum Wrapped: Int, Sendable {
      case ok = 0, cancelled, unknown, invalidArgument, deadlineExceeded, notFound, alreadyExists
      case permissionDenied, resourceExhausted, failedPrecondition, aborted, outOfRange
      case unimplemented, `internal`, unavailable, dataLoss, unauthenticated
    }
    private let wrapped: Wrapped
    private init(_ wrapped: Wrapped) { self.wrapped = wrapped }

    /// Creates a code from its numeric wire value (`grpc-status`).
    ///
    /// - Parameter rawValue: A value from 0 to 16.
    /// - Returns: `nil` for any other value.
    public init?(rawValue: Int) {
      guard let wrapped = Wrapped(rawValue: rawValue) else { return nil }
      self.wrapped = wrapped
    }

    /// The numeric wire value sent as `grpc-status`.
    public var rawValue: Int { wrapped.rawValue }

    /// Not an error; returned on success.
    public static let ok = Code(.ok)
    /// The operation was cancelled, typically by the caller.
    public static let cancelled = Code(.cancelled)
    /// An unknown error, or an error without a mapping to a status.
    public static let unknown = Code(.unknown)
    /// The client specified an invalid argument.
    public static let invalidArgument = Code(.invalidArgument)
    /// The deadline expired before the operation could complete.
    public static let deadlineExceeded = Code(.deadlineExceeded)
    /// A requested entity was not found.
    public static let notFound = Code(.notFound)
    /// The entity a client tried to create already exists.
    public static let alreadyExists = Code(.alreadyExists)
    /// The caller may not execute the operation.
    public static let permissionDenied = Code(.permissionDenied)
    /// A resource, such as a quota or a message size limit, has been exhausted.
    public static let resourceExhausted = Code(.resourceExhausted)
    /// The system is not in a state required for the operation.
    public static let failedPrecondition = Code(.failedPrecondition)
    /// The operation was aborted, typically because of a concurrency conflict.
    public static let aborted = Code(.aborted)
    /// The operation was attempted past the valid range.
    public static let outOfRange = Code(.outOfRange)
    /// The operation is not implemented or not supported.
    public static let unimplemented = Code(.unimplemented)
    /// An internal invariant was broken.
    public static let `internal` = Code(.internal)
    /// The service is currently unavailable; the caller may retry.
    public static let unavailable = Code(.unavailable)
    /// Unrecoverable data loss or corruption.
    public static let dataLoss = Code(.dataLoss)
    /// The request has no valid authentication credentials.
    public static let unauthenticated = Code(.unauthenticated)

    /// The canonical upper-case name, such as `INVALID_ARGUMENT`.
    public var description: String {
      switch wrapped {
      case .ok: "OK"
      case .cancelled: "CANCELLED"
      case .unknown: "UNKNOWN"
      case .invalidArgument: "INVALID_ARGUMENT"
      case .deadlineExceeded: "DEADLINE_EXCEEDED"
      case .notFound: "NOT_FOUND"
      case .alreadyExists: "ALREADY_EXISTS"
      case .permissionDenied: "PERMISSION_DENIED"
      case .resourceExhausted: "RESOURCE_EXHAUSTED"
      case .failedPrecondition: "FAILED_PRECONDITION"
      case .aborted: "ABORTED"
      case .outOfRange: "OUT_OF_RANGE"
      case .unimplemented: "UNIMPLEMENTED"
      case .internal: "INTERNAL"
      case .unavailable: "UNAVAILABLE"
      case .dataLoss: "DATA_LOSS"
      case .unauthenticated: "UNAUTHENTICATED"
      }
    }
  }

  /// The status code sent as `grpc-status`.
  public var code: Code
  /// A message for the caller, sent as `grpc-message`. Never put secrets here.
  public var message: String
  /// Trailing metadata sent with the status.
  public var metadata: Metadata
  /// The underlying error, kept for logging; never sent to the caller.
  public var cause: (any Error)?

  /// Creates an error.
  ///
  /// - Parameters:
  ///   - code: The status code.
  ///   - message: A message for the caller.
  ///   - metadata: Trailing metadata to send with the status.
  ///   - cause: The underlying error, for logs only.
  public init(code: Code, message: String, metadata: Metadata = [:], cause: (any Error)? = nil) {
    self.code = code
    self.message = message
    self.metadata = metadata
    self.cause = cause
  }

  /// `CODE: message`.
  public var description: String { message.isEmpty ? "\(code)" : "\(code): \(message)" }
}

/// An error that knows which gRPC status it maps to.
///
/// Domain errors adopt it so that throwing them from a handler sends a precise status:
///
/// ```swift
/// extension StoreError: RPCErrorConvertible {
///   var rpcErrorCode: RPCError.Code { .notFound }
///   var rpcErrorMessage: String { "tenant \(id) not found" }
/// }
/// ```
public protocol RPCErrorConvertible: Error {
  /// The status code to send.
  var rpcErrorCode: RPCError.Code { get }
  /// The message to send as `grpc-message`.
  var rpcErrorMessage: String { get }
  /// Trailing metadata to send; empty by default.
  var rpcErrorMetadata: Metadata { get }
}

extension RPCErrorConvertible {
  /// No trailing metadata.
  public var rpcErrorMetadata: Metadata { [:] }

  /// The error as an ``RPCError`` whose cause is `self`.
  public var rpcError: RPCError {
    RPCError(code: rpcErrorCode, message: rpcErrorMessage, metadata: rpcErrorMetadata, cause: self)
  }
}

extension RPCError {
  /// Maps any error a handler throws to the status sent to the caller.
  ///
  /// ``RPCError`` passes through, ``RPCErrorConvertible`` converts itself, task cancellation
  /// becomes `CANCELLED`, and anything else becomes `UNKNOWN` with a generic message (details of
  /// an unexpected error never leak to the caller; they stay in ``cause``).
  ///
  /// - Parameter error: The thrown error.
  public init(mapping error: any Error) {
    switch error {
    case let error as RPCError:
      self = error
    case let error as any RPCErrorConvertible:
      self = error.rpcError
    case is CancellationError:
      self.init(code: .cancelled, message: "the RPC was cancelled", cause: error)
    default:
      self.init(code: .unknown, message: "the server failed to handle the request", cause: error)
    }
  }
}

extension RPCError {
  /// `INVALID_ARGUMENT` naming a field (AIP-193): the message is `field: description`, and the
  /// trailers carry a `google.rpc.Status` with a `google.rpc.BadRequest` holding one field
  /// violation, in `grpc-status-details-bin`.
  ///
  /// ```swift
  /// throw RPCError.invalidArgument(field: "queries[2].user_id", "must not be empty")
  /// ```
  ///
  /// - Parameters:
  ///   - field: The field's path in proto field-path form, such as `queries[2].user_id`.
  ///   - description: What is wrong with it.
  public static func invalidArgument(field: String, _ description: String) -> RPCError {
    var violation = Google_Rpc_BadRequest.FieldViolation()
    violation.field = field
    violation.description = description
    var badRequest = Google_Rpc_BadRequest()
    badRequest.fieldViolations = [violation]
    var status = Google_Rpc_Status()
    status.code = Int32(Code.invalidArgument.rawValue)
    status.message = "\(field): \(description)"
    status.details = [Google_Protobuf_Any(packing: badRequest)]
    status = StatusBounds.status(status)
    var error = RPCError(code: .invalidArgument, message: StatusBounds.message(status.message))
    error.metadata.addBinary(status.serializedBytes(), forKey: StatusBounds.detailsKey)
    return error
  }
}
