import CTLSShims

/// TLS settings of ``HTTP2ServerTransport``: TLS 1.2 or 1.3, ALPN `h2` required.
///
/// ```swift
/// var configuration = HTTP2ServerTransport.Configuration(host: "0.0.0.0", port: 50051)
/// configuration.tls = TLSConfiguration(certificateChainPath: "server.pem", privateKeyPath: "server.key")
/// ```
public struct TLSConfiguration: Sendable, Hashable {
  /// A PEM file with the server certificate first, then any intermediate certificates.
  public var certificateChainPath: String
  /// A PEM file with the private key of the certificate.
  public var privateKeyPath: String
  /// A PEM file of CA certificates: when set, every client must present a certificate signed by
  /// one of them (mutual TLS); a client without one is refused during the handshake.
  public var clientCAPath: String?

  /// Creates TLS settings.
  /// - Parameters:
  ///   - certificateChainPath: The certificate chain (PEM).
  ///   - privateKeyPath: The private key (PEM).
  ///   - clientCAPath: CA certificates that client certificates must chain to; `nil` for no mTLS.
  public init(certificateChainPath: String, privateKeyPath: String, clientCAPath: String? = nil) {
    self.certificateChainPath = certificateChainPath
    self.privateKeyPath = privateKeyPath
    self.clientCAPath = clientCAPath
  }
}

/// TLS settings of ``HTTP2ClientTransport``: TLS 1.2 or 1.3, ALPN `h2`, the server verified.
///
/// ```swift
/// var configuration = HTTP2ClientTransport.Configuration(host: "status.example.com", port: 443)
/// configuration.tls = ClientTLSConfiguration(caFilePath: "ca.pem")
/// ```
public struct ClientTLSConfiguration: Sendable, Hashable {
  /// A PEM file of CA certificates to verify the server against; `nil` uses the system store.
  public var caFilePath: String?
  /// The name sent as SNI and matched against the server certificate; `nil` uses the host.
  /// An IP address is matched against the certificate's IP addresses and sends no SNI.
  public var serverName: String?
  /// A PEM client certificate chain for mutual TLS (with ``privateKeyPath``).
  public var certificateChainPath: String?
  /// The PEM private key of ``certificateChainPath``.
  public var privateKeyPath: String?

  /// Creates client TLS settings.
  /// - Parameters:
  ///   - caFilePath: CA certificates (PEM); `nil` for the system store.
  ///   - serverName: The name to verify and send as SNI; `nil` for the configured host.
  ///   - certificateChainPath: A client certificate chain for mutual TLS.
  ///   - privateKeyPath: The client certificate's key.
  public init(
    caFilePath: String? = nil, serverName: String? = nil, certificateChainPath: String? = nil,
    privateKeyPath: String? = nil
  ) {
    self.caFilePath = caFilePath
    self.serverName = serverName
    self.certificateChainPath = certificateChainPath
    self.privateKeyPath = privateKeyPath
  }
}

/// A TLS setup failure: a certificate, key or CA file that cannot be loaded or does not match.
public struct TLSError: Error, CustomStringConvertible, Sendable {
  /// What failed, with OpenSSL's reason.
  public let description: String
}

/// Reads a C error buffer filled by the shims.
private func errorText(_ buffer: [CChar]) -> String {
  String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

/// An OpenSSL context (certificates, verification, ALPN), shared by the connections made from it.
/// OpenSSL contexts are safe to use from several threads once set up.
final class TLSContext: @unchecked Sendable {
  let pointer: OpaquePointer

  private init(pointer: OpaquePointer) { self.pointer = pointer }

  deinit { ctls_context_free(pointer) }

  /// A server context from PEM files.
  static func server(_ configuration: TLSConfiguration) throws(TLSError) -> TLSContext {
    var error = [CChar](repeating: 0, count: 512)
    let made = ctls_server_context_new(
      configuration.certificateChainPath, configuration.privateKeyPath, configuration.clientCAPath, &error,
      error.count)
    guard let made else { throw TLSError(description: errorText(error)) }
    return TLSContext(pointer: made)
  }

  /// A client context.
  static func client(_ configuration: ClientTLSConfiguration) throws(TLSError) -> TLSContext {
    var error = [CChar](repeating: 0, count: 512)
    let made = ctls_client_context_new(
      configuration.caFilePath, configuration.certificateChainPath, configuration.privateKeyPath, &error,
      error.count)
    guard let made else { throw TLSError(description: errorText(error)) }
    return TLSContext(pointer: made)
  }
}

/// One TLS connection over memory buffers, owned by a loop thread: ciphertext read from the socket
/// goes in with ``feed(_:)``; ciphertext to send comes out of ``takeOutput(appendingTo:)``.
final class TLSConnection {
  private let pointer: OpaquePointer
  /// Keeps the context alive as long as the connection (OpenSSL also holds a reference).
  private let context: TLSContext
  /// Where the shims write error messages (one allocation per connection, not per call).
  private let errorBuffer: UnsafeMutablePointer<CChar>
  private static let errorCapacity = 512
  /// The handshake has completed; application data can flow.
  private(set) var handshakeComplete = false

  enum HandshakeResult {
    case pending
    case complete
    case failed(String)
  }

  enum ReadResult {
    case bytes(Int)
    case wantMore
    case closed
    case failed(String)
  }

  /// A server-side connection; `nil` when OpenSSL is out of memory.
  init?(server context: TLSContext) {
    guard let made = ctls_connection_new_server(context.pointer) else { return nil }
    pointer = made
    self.context = context
    errorBuffer = Self.makeErrorBuffer()
  }

  /// A client-side connection verifying `serverName`; `nil` when OpenSSL is out of memory.
  init?(client context: TLSContext, serverName: String) {
    guard let made = ctls_connection_new_client(context.pointer, serverName) else { return nil }
    pointer = made
    self.context = context
    errorBuffer = Self.makeErrorBuffer()
  }

  deinit {
    ctls_connection_free(pointer)
    errorBuffer.deallocate()
  }

  private static func makeErrorBuffer() -> UnsafeMutablePointer<CChar> {
    let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: errorCapacity)
    buffer.initialize(repeating: 0, count: errorCapacity)
    return buffer
  }

  /// Adds received ciphertext; false when out of memory.
  func feed(_ bytes: UnsafeRawBufferPointer) -> Bool {
    guard let base = bytes.baseAddress, bytes.count > 0 else { return true }
    return ctls_feed(pointer, base, bytes.count) == 0
  }

  /// Advances the handshake with what has been fed.
  func handshake() -> HandshakeResult {
    if handshakeComplete { return .complete }
    switch ctls_handshake(pointer, errorBuffer, Self.errorCapacity) {
    case 1:
      handshakeComplete = true
      return .complete
    case 0: return .pending
    default: return .failed(String(cString: errorBuffer))
    }
  }

  /// Decrypts received application data into `buffer`.
  func read(into buffer: UnsafeMutableRawBufferPointer) -> ReadResult {
    let n = ctls_read(pointer, buffer.baseAddress, buffer.count, errorBuffer, Self.errorCapacity)
    if n > 0 { return .bytes(n) }
    if n == 0 { return .wantMore }
    if n == -1 { return .closed }
    return .failed(String(cString: errorBuffer))
  }

  /// Encrypts application data into the output; returns an error message on failure.
  func write(_ plaintext: [UInt8]) -> String? {
    let result = plaintext.withUnsafeBytes { bytes in
      ctls_write(pointer, bytes.baseAddress, bytes.count, errorBuffer, Self.errorCapacity)
    }
    return result == 0 ? nil : String(cString: errorBuffer)
  }

  /// Moves the ciphertext waiting to be sent to the end of `output`.
  func takeOutput(appendingTo output: inout [UInt8]) {
    var pending = ctls_pending_output(pointer)
    while pending > 0 {
      let start = output.count
      output.append(contentsOf: repeatElement(0, count: pending))
      let taken = output.withUnsafeMutableBytes { bytes in
        ctls_take_output(pointer, bytes.baseAddress! + start, pending)
      }
      output.removeLast(pending - taken)
      if taken == 0 { return }
      pending = ctls_pending_output(pointer)
    }
  }

  /// Whether ALPN chose `h2`.
  var negotiatedH2: Bool { ctls_negotiated_h2(pointer) != 0 }

  /// The protocol version, such as `TLSv1.3`.
  var version: String { String(cString: ctls_version(pointer)) }
}
