public import RPCCore
public import RPCHTTP2Transport

extension SubstatusClient {
  /// Creates a client that connects over HTTP/2 to `host:port`: cleartext (h2c), or TLS with
  /// `tls` (for example `ClientTLSConfiguration(caFilePath: "ca.pem")`).
  ///
  /// The connection opens on the first call and reopens after failures; it closes when the last
  /// copy of the client goes away.
  ///
  /// ```swift
  /// let client = try SubstatusClient(address: "127.0.0.1:50051", apiKey: readKey)
  /// let status = try await client.status(appID: "app_1", userID: "user-42")
  /// ```
  ///
  /// - Parameters:
  ///   - address: `HOST:PORT`, such as `127.0.0.1:50051`, `substatus.internal:50051` or `[::1]:50051`.
  ///   - apiKey: The key to authenticate with; `nil` for health checks only.
  ///   - defaultTimeout: The deadline of calls that set none.
  ///   - retryPolicy: How idempotent calls are retried after `UNAVAILABLE`.
  ///   - tls: TLS settings (CA file, client certificate); `nil` for cleartext.
  /// - Throws: `RPCError` `INVALID_ARGUMENT` for a malformed address, `UNAVAILABLE` when the
  ///   transport cannot start (or the TLS files cannot be loaded).
  public init(
    address: String, apiKey: String?, defaultTimeout: Duration? = nil,
    retryPolicy: RetryPolicy = .default, tls: ClientTLSConfiguration? = nil
  ) throws(RPCError) {
    let (host, port) = try Self.parseAddress(address)
    let transport: HTTP2ClientTransport
    do {
      var configuration = HTTP2ClientTransport.Configuration(host: host, port: port)
      configuration.tls = tls
      transport = try HTTP2ClientTransport(configuration: configuration)
    } catch {
      throw RPCError(
        code: .unavailable, message: "cannot start the HTTP/2 transport: \(error)", cause: error)
    }
    self.init(
      transport: transport, apiKey: apiKey, defaultTimeout: defaultTimeout, retryPolicy: retryPolicy
    )
  }

  /// Splits `HOST:PORT` (`[V6]:PORT` for IPv6) into host and port.
  ///
  /// - Parameter address: The address.
  /// - Returns: The host (without brackets) and the port, 1 to 65535.
  /// - Throws: `RPCError` `INVALID_ARGUMENT` naming the address.
  public static func parseAddress(_ address: String) throws(RPCError) -> (host: String, port: Int) {
    guard let colon = address.lastIndex(of: ":"), colon != address.startIndex,
      let port = Int(address[address.index(after: colon)...]), (1...65_535).contains(port)
    else {
      throw RPCError(code: .invalidArgument, message: "address must be HOST:PORT, not '\(address)'")
    }
    var host = String(address[..<colon])
    if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
    guard !host.isEmpty else {
      throw RPCError(code: .invalidArgument, message: "address must be HOST:PORT, not '\(address)'")
    }
    return (host, port)
  }
}
