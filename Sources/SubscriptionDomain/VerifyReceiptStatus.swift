/// What a server should do about a verifyReceipt `status`.
public enum VerifyReceiptAction: String, Sendable, Hashable, Codable, CaseIterable {
  /// `0`: use the body.
  case accept = "ACCEPT"
  /// `21007`: a sandbox receipt sent to production: send it to the sandbox URL (once).
  case retryInSandbox = "RETRY_IN_SANDBOX"
  /// `21008`: a production receipt sent to the sandbox: send it to the production URL (once).
  case retryInProduction = "RETRY_IN_PRODUCTION"
  /// `21002`, `21005`, `21009`, `21100`–`21199` and any retryable status: try again later with
  /// backoff, a bounded number of times.
  case retryLater = "RETRY_LATER"
  /// `21004`: the app's shared secret is wrong: a tenant configuration error; alert, change no
  /// user state.
  case checkSharedSecret = "CHECK_SHARED_SECRET"
  /// `21000`: the request itself is wrong; do not retry as is.
  case fixRequest = "FIX_REQUEST"
  /// `21003`: the receipt is not authentic: reject it, grant nothing.
  case rejectNotAuthentic = "REJECT_NOT_AUTHENTIC"
  /// `21010`: the account is unknown or deleted: reject, grant nothing.
  case rejectUnknownAccount = "REJECT_UNKNOWN_ACCOUNT"
  /// `21006`: an iOS 6 style receipt whose subscription expired. Apple still decodes and returns
  /// the receipt: store the body like status 0 (rule 20); evaluation then finds it expired.
  case treatAsExpired = "TREAT_AS_EXPIRED"
  /// `21100`–`21199` with `is-retryable` 0: Apple says the error is unresolvable.
  case giveUp = "GIVE_UP"
  /// `21001` and codes Apple does not document: an unknown error.
  case unknown = "UNKNOWN"
}

/// A verifyReceipt `status` with Apple's meaning and the action a server should take.
///
/// Source: https://developer.apple.com/documentation/appstorereceipts/status (see
/// `reference/apple-domain.md` §1.3).
public struct VerifyReceiptStatus: Sendable, Hashable, Codable, CustomStringConvertible {
  /// Apple's code.
  public var code: Int
  /// `is-retryable` / `is_retryable` when the body carried it.
  public var isRetryable: Bool?
  /// The body's `environment`, when present.
  public var environment: Environment?
  /// Apple's meaning of the code.
  public var meaning: String
  /// What the server should do.
  public var action: VerifyReceiptAction

  /// Describes `code`, honouring Apple's retry flag.
  public init(code: Int, isRetryable: Bool? = nil, environment: Environment? = nil) {
    self.code = code
    self.isRetryable = isRetryable
    self.environment = environment
    let (meaning, action) = VerifyReceiptStatus.describe(code: code, isRetryable: isRetryable)
    self.meaning = meaning
    self.action = action
  }

  /// Whether a server may try the same request again later.
  public var isTemporary: Bool { action == .retryLater }

  /// Whether the body carries a receipt to store (rule 20): status `0`, and `21006`, whose
  /// receipt Apple decodes and returns although the subscription expired.
  public var carriesReceipt: Bool { action == .accept || action == .treatAsExpired }

  /// `code (meaning) -> action`.
  public var description: String { "verifyReceipt status \(code) (\(meaning)): \(action.rawValue)" }

  private static func describe(code: Int, isRetryable: Bool?) -> (String, VerifyReceiptAction) {
    switch code {
    case 0: return ("The receipt is valid.", .accept)
    case 21000:
      return ("The request to the App Store was not made using the HTTP POST request method.",
        .fixRequest)
    case 21001: return ("The App Store no longer sends this status code.", .unknown)
    case 21002:
      return ("The data in the receipt-data property was malformed or the service experienced a"
        + " temporary issue. Try again.", .retryLater)
    case 21003: return ("The system couldn't authenticate the receipt.", .rejectNotAuthentic)
    case 21004:
      return ("The shared secret you provided doesn't match the shared secret on file for your"
        + " account.", .checkSharedSecret)
    case 21005: return ("The receipt server was temporarily unable to provide the receipt. Try again.",
      .retryLater)
    case 21006:
      return ("This receipt is valid, but the subscription is in an expired state.", .treatAsExpired)
    case 21007:
      return ("This receipt is from the test environment, but you sent it to the production"
        + " environment for verification.", .retryInSandbox)
    case 21008:
      return ("This receipt is from the production environment, but you sent it to the test"
        + " environment for verification.", .retryInProduction)
    case 21009: return ("Internal data access error. Try again later.", .retryLater)
    case 21010:
      return ("The system can't find the user account or the user account has been deleted.",
        .rejectUnknownAccount)
    case 21100...21199:
      return ("Internal data access error.", isRetryable == false ? .giveUp : .retryLater)
    default:
      return ("A status code Apple does not document.", isRetryable == true ? .retryLater : .unknown)
    }
  }
}
