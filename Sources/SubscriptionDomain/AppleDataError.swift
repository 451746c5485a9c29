/// Why Apple data (a verifyReceipt body, a notification, a decoded JWS payload, a catalog
/// duration) could not be used: the field, what was wrong, and for a verifyReceipt body with a
/// non-zero `status`, Apple's code, meaning and the action a server should take.
public struct AppleDataError: Error, Sendable, Hashable, CustomStringConvertible {
  /// What kind of problem.
  public var code: Code
  /// The JSON path of the offending field (`latest_receipt_info[2].purchase_date_ms`), if any.
  public var field: String?
  /// A precise, human-readable message (never contains secrets).
  public var message: String
  /// For ``Code/verifyReceiptStatus``: Apple's status, its meaning and the server's action.
  public var verifyReceiptStatus: VerifyReceiptStatus?

  /// Creates an error.
  public init(
    code: Code, field: String?, message: String, verifyReceiptStatus: VerifyReceiptStatus? = nil
  ) {
    self.code = code
    self.field = field
    self.message = message
    self.verifyReceiptStatus = verifyReceiptStatus
  }

  /// A kind of ``AppleDataError``; a struct so kinds can be added without breaking callers.
  public struct Code: Sendable, Hashable, CustomStringConvertible {
    private enum Value: String, Sendable, Hashable {
      case invalidJSON, missingField, invalidValue, verifyReceiptStatus
    }
    private let value: Value
    private init(_ value: Value) { self.value = value }

    /// The bytes are not JSON.
    public static let invalidJSON = Code(.invalidJSON)
    /// A required field is absent (or null).
    public static let missingField = Code(.missingField)
    /// A field has the wrong JSON kind or a value that cannot be read.
    public static let invalidValue = Code(.invalidValue)
    /// A verifyReceipt body carries a non-zero `status`: see ``AppleDataError/verifyReceiptStatus``.
    public static let verifyReceiptStatus = Code(.verifyReceiptStatus)

    /// The code's name.
    public var description: String { value.rawValue }
  }

  /// `code: field: message`.
  public var description: String {
    if let field { return "\(code): \(field): \(message)" }
    return "\(code): \(message)"
  }
}
