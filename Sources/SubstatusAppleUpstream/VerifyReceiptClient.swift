import Foundation
import SubscriptionDomain
import SubstatusClock
import SubstatusJSON
import SubstatusServiceCore

/// Why verifyReceipt gave no usable answer.
public struct VerifyReceiptFailure: Error, Sendable, CustomStringConvertible {
  /// What kind of failure.
  public enum Kind: Sendable, Hashable {
    /// Apple answered a status that is the caller's problem (21000, 21002 after retries, 21003, 21010, ...).
    case rejected
    /// 21004: the app's shared secret is wrong (or missing).
    case wrongSharedSecret
    /// Apple is unavailable or kept answering retryable statuses; try again later.
    case unavailable
  }
  /// What kind of failure.
  public var kind: Kind
  /// Apple's status, when it answered one.
  public var status: VerifyReceiptStatus?
  /// A message for the caller (never contains the receipt or the secret).
  public var message: String

  public var description: String { message }
}

/// Calls Apple's `verifyReceipt` (or the App Store simulator): production first, sandbox on 21007,
/// production on 21008, bounded retries with backoff on temporary failures.
public struct VerifyReceiptClient: Sendable {
  /// Where production receipts go.
  public var productionURL: URL
  /// Where sandbox receipts go.
  public var sandboxURL: URL
  /// The time limit of one HTTP request.
  public var timeout: Duration
  /// How many times one URL is tried for temporary failures (21002, 21005, 21009, retryable, 5xx).
  public var maxAttempts: Int
  /// The first backoff: retry *n* waits a random duration in `[½, 1] × initialBackoff × 2^(n-1)`.
  public var initialBackoff: Duration
  /// The clock the backoffs wait on.
  public var clock: any ServiceClock
  package let poster: any HTTPPoster

  /// Apple's production endpoint.
  public static let appleProduction = URL(string: "https://buy.itunes.apple.com/verifyReceipt")!
  /// Apple's sandbox endpoint.
  public static let appleSandbox = URL(string: "https://sandbox.itunes.apple.com/verifyReceipt")!

  /// Creates a client.
  public init(
    productionURL: URL = VerifyReceiptClient.appleProduction, sandboxURL: URL = VerifyReceiptClient.appleSandbox,
    timeout: Duration = .seconds(10), maxAttempts: Int = 3, initialBackoff: Duration = .milliseconds(200),
    poster: any HTTPPoster = OutboundHTTPPoster.apple(), clock: any ServiceClock = SystemClock()
  ) {
    self.productionURL = productionURL
    self.sandboxURL = sandboxURL
    self.timeout = timeout
    self.maxAttempts = max(1, maxAttempts)
    self.initialBackoff = initialBackoff
    self.clock = clock
    self.poster = poster
  }

  /// Verifies a receipt.
  ///
  /// - Parameters:
  ///   - receiptData: The base64 receipt as the app sent it.
  ///   - password: The app's shared secret (needed for auto-renewable subscriptions).
  ///   - excludeOldTransactions: Apple's `exclude-old-transactions`.
  /// - Returns: The parsed response and the raw body (for storage and replay).
  /// - Throws: ``VerifyReceiptFailure``.
  public func verify(
    receiptData: String, password: String?, excludeOldTransactions: Bool = false
  ) async throws(VerifyReceiptFailure) -> VerifyReceiptResponse {
    var body = JSONObject()
    body.append("receipt-data", .string(receiptData))
    if let password { body.append("password", .string(password)) }
    if excludeOldTransactions { body.append("exclude-old-transactions", .bool(true)) }
    let bytes = JSONValue.object(body).serializedBytes()

    var url = productionURL
    var redirected = false
    while true {
      do {
        return try await post(url: url, body: bytes)
      } catch let failure {
        guard let status = failure.status, !redirected else { throw failure }
        switch status.action {
        case .retryInSandbox where url == productionURL:
          url = sandboxURL
        case .retryInProduction where url == sandboxURL:
          url = productionURL
        default:
          throw failure
        }
        redirected = true
      }
    }
  }

  /// Posts to one URL with retries for temporary failures; a redirect status comes back as a
  /// failure carrying the status.
  private func post(url: URL, body: [UInt8]) async throws(VerifyReceiptFailure) -> VerifyReceiptResponse {
    var attempt = 0
    var lastFailure: VerifyReceiptFailure
    repeat {
      attempt += 1
      do {
        let (status, responseBody) = try await poster.post(url: url, body: body, timeout: timeout)
        guard (200..<300).contains(status) else {
          lastFailure = VerifyReceiptFailure(kind: .unavailable, status: nil, message: "verifyReceipt answered HTTP \(status)")
          if status >= 500 || status == 429 { try await backoff(attempt); continue }
          throw lastFailure
        }
        do {
          return try VerifyReceiptResponse(parsing: responseBody)
        } catch {
          guard let s = error.verifyReceiptStatus else {
            throw VerifyReceiptFailure(kind: .unavailable, status: nil, message: "verifyReceipt answered an unreadable body: \(error.message)")
          }
          lastFailure = VerifyReceiptClient.failure(for: s)
          if s.action == .retryLater { try await backoff(attempt); continue }
          throw lastFailure
        }
      } catch let failure as VerifyReceiptFailure {
        throw failure
      } catch {
        lastFailure = VerifyReceiptFailure(kind: .unavailable, status: nil, message: "verifyReceipt unreachable: \(error)")
        try await backoff(attempt)
      }
    } while attempt < maxAttempts
    throw lastFailure
  }

  private func backoff(_ attempt: Int) async throws(VerifyReceiptFailure) {
    guard attempt < maxAttempts else { return }
    let ceiling = initialBackoff * (1 << min(attempt - 1, 10))
    let jittered = ceiling * Double.random(in: 0.5...1.0)
    do { try await clock.sleep(for: jittered) } catch {
      throw VerifyReceiptFailure(kind: .unavailable, status: nil, message: "cancelled while retrying verifyReceipt")
    }
  }

  package static func failure(for status: VerifyReceiptStatus) -> VerifyReceiptFailure {
    let kind: VerifyReceiptFailure.Kind
    switch status.action {
    case .checkSharedSecret: kind = .wrongSharedSecret
    case .retryLater: kind = .unavailable
    default: kind = .rejected
    }
    return VerifyReceiptFailure(kind: kind, status: status, message: "Apple verifyReceipt status \(status.code): \(status.meaning)")
  }
}
