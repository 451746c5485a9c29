import Synchronization

/// A key for a typed value that an interceptor attaches to a ``ServerContext``.
///
/// ```swift
/// enum TenantKey: ServerContextKey { typealias Value = TenantID }
/// context[TenantKey.self] = tenant       // in the auth interceptor
/// let tenant = context[TenantKey.self]   // in the handler
/// ```
public protocol ServerContextKey {
  /// The type of the value stored under this key.
  associatedtype Value: Sendable
}

/// What a server handler knows about the RPC it serves, besides the request message.
///
/// Interceptors receive it first and may attach typed values (``subscript(_:)``) that the handler
/// reads, so handlers never parse headers themselves.
public struct ServerContext: Sendable {
  /// The full method path, such as `/grpc.health.v1.Health/Check`.
  public let method: String
  /// The request metadata (custom headers; reserved gRPC and HTTP/2 headers are not included).
  public let metadata: Metadata
  /// When the caller stops waiting, from `grpc-timeout`; `nil` when the caller set none.
  public let deadline: ContinuousClock.Instant?
  /// The caller's address, such as `ipv4:127.0.0.1:53122`, or `in-process`.
  public let peer: String
  /// Metadata the handler wants sent back: initial metadata and trailing metadata.
  public let response: ResponseMetadata
  /// The protocol the call arrived in.
  public let rpcProtocol: RPCProtocol
  /// How the call's messages are encoded; typed handlers decode and encode with it
  /// (``MessageCoding``).
  public let codec: MessageCodec
  private var values: [ObjectIdentifier: any Sendable] = [:]

  /// Creates a context; transports and tests call this.
  ///
  /// - Parameters:
  ///   - method: The full method path.
  ///   - metadata: The request metadata.
  ///   - deadline: The caller's deadline, if any.
  ///   - peer: The caller's address.
  ///   - response: Where the handler's response metadata goes.
  ///   - rpcProtocol: The protocol the call arrived in.
  ///   - codec: How the call's messages are encoded.
  public init(
    method: String, metadata: Metadata, deadline: ContinuousClock.Instant?, peer: String,
    response: ResponseMetadata = ResponseMetadata(), rpcProtocol: RPCProtocol = .grpc, codec: MessageCodec = .protobuf
  ) {
    self.method = method
    self.metadata = metadata
    self.deadline = deadline
    self.peer = peer
    self.response = response
    self.rpcProtocol = rpcProtocol
    self.codec = codec
  }

  /// The service part of ``method``, such as `grpc.health.v1.Health`.
  public var service: Substring {
    let path = method.dropFirst()
    return path.firstIndex(of: "/").map { path[..<$0] } ?? path
  }

  /// A typed value attached by an interceptor, or `nil`.
  public subscript<Key: ServerContextKey>(_ key: Key.Type) -> Key.Value? {
    get { values[ObjectIdentifier(key)] as? Key.Value }
    set { values[ObjectIdentifier(key)] = newValue }
  }

  /// The time left until ``deadline``, or `nil` without a deadline.
  public var timeRemaining: Duration? { deadline.map { $0 - .now } }
}

/// Metadata a handler sends back with its response; safe to use from any task.
public final class ResponseMetadata: Sendable {
  private let storage = Mutex<(initial: Metadata, trailing: Metadata)>(([:], [:]))

  /// Creates empty response metadata.
  public init() {}

  /// Metadata sent in the response headers, before the message.
  public var initial: Metadata {
    get { storage.withLock { $0.initial } }
    set { storage.withLock { $0.initial = newValue } }
  }

  /// Metadata sent in the trailers, with the status.
  public var trailing: Metadata {
    get { storage.withLock { $0.trailing } }
    set { storage.withLock { $0.trailing = newValue } }
  }

  /// Adds one string value to the initial metadata.
  public func addInitial(_ value: String, forKey key: String) {
    storage.withLock { $0.initial.addString(value, forKey: key) }
  }

  /// Adds one string value to the trailing metadata.
  public func addTrailing(_ value: String, forKey key: String) {
    storage.withLock { $0.trailing.addString(value, forKey: key) }
  }
}
