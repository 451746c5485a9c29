/// A failure to parse, create or use a key or certificate (bad PEM/DER, wrong curve, an OpenSSL
/// failure). Not a verification verdict: signed data that fails verification gives a
/// ``SignedDataVerificationError``.
public struct AppStoreCryptoError: Error, Sendable, Hashable, CustomStringConvertible {
  /// What went wrong, for humans; never contains key material.
  public var message: String

  /// An error with `message`.
  public init(_ message: String) { self.message = message }

  /// The message.
  public var description: String { message }
}
