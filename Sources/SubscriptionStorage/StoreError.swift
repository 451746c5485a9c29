/// The one error type every ``Store`` method throws.
///
/// The service maps codes to gRPC statuses: ``Code-swift.struct/notFound`` → `NOT_FOUND`,
/// ``Code-swift.struct/alreadyExists`` → `ALREADY_EXISTS`, ``Code-swift.struct/invalidArgument``
/// → `INVALID_ARGUMENT`, ``Code-swift.struct/unavailable`` → `UNAVAILABLE`,
/// ``Code-swift.struct/resourceExhausted`` → `RESOURCE_EXHAUSTED`, the rest → `INTERNAL`.
public struct StoreError: Error, Sendable, Hashable, CustomStringConvertible {
  /// A machine-readable reason; a struct over a private enum so codes can be added.
  public struct Code: Hashable, Sendable, CustomStringConvertible {
    private enum Value: String, Hashable, Sendable {
      case notFound, alreadyExists, invalidArgument, unavailable, corrupt, newerSchema
      case secretUnavailable, internalError, resourceExhausted
    }
    private let value: Value
    private init(_ value: Value) { self.value = value }

    /// The tenant, app, key or record does not exist (or belongs to another tenant).
    public static let notFound = Code(.notFound)
    /// A record with the same identity (id, bundle id, key hash) already exists.
    public static let alreadyExists = Code(.alreadyExists)
    /// An argument is malformed (a bad page cursor, an operator key with a tenant, ...).
    public static let invalidArgument = Code(.invalidArgument)
    /// The store cannot serve now: I/O error, disk full, closed. Retrying later may succeed.
    public static let unavailable = Code(.unavailable)
    /// The database file is damaged or is not a database.
    public static let corrupt = Code(.corrupt)
    /// The database was written by a newer substatus (its schema version is unknown to this one).
    public static let newerSchema = Code(.newerSchema)
    /// A stored secret cannot be opened: its master key is not configured or the GCM tag failed.
    public static let secretUnavailable = Code(.secretUnavailable)
    /// A cap on stored records is reached (webhooks per app or tenant): nothing was written.
    public static let resourceExhausted = Code(.resourceExhausted)
    /// A bug or an unexpected database answer.
    public static let internalError = Code(.internalError)

    /// The code's name, e.g. `notFound`.
    public var description: String { value.rawValue }
  }

  /// The reason.
  public var code: Code
  /// What failed, naming the resource (never secret material).
  public var message: String

  /// Creates an error.
  /// - Parameters:
  ///   - code: the reason.
  ///   - message: what failed, naming the resource.
  public init(_ code: Code, _ message: String) {
    self.code = code
    self.message = message
  }

  /// `code: message`.
  public var description: String { "\(code): \(message)" }

  /// `notFound` for a resource kind and id, e.g. `app "a1" not found`.
  public static func notFound(_ kind: String, _ id: String) -> StoreError {
    StoreError(.notFound, "\(kind) \"\(id)\" not found")
  }
}
