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
///
/// A context is a value, but it holds its fields in one shared object: a copy (and a call copies
/// it from the transport through the interceptors to the handler several times) is one reference
/// count, and attaching a value copies the fields only when the context is shared.
public struct ServerContext: Sendable {
  /// The fields, shared by copies until one of them attaches a value.
  private final class Storage: @unchecked Sendable {
    // `values` changes only through a context that holds the only reference (``ServerContext``'s
    // subscript copies the storage first otherwise): no two threads ever see it change.
    let method: String
    let metadata: Metadata
    let deadline: ContinuousClock.Instant?
    let peer: String
    let rpcProtocol: RPCProtocol
    let codec: MessageCodec
    /// The call's response metadata, made by the first who asks for it (most calls never do).
    let response = AtomicLazyReference<ResponseMetadata>()
    var values: [ObjectIdentifier: any Sendable]

    init(
      method: String, metadata: Metadata, deadline: ContinuousClock.Instant?, peer: String, rpcProtocol: RPCProtocol,
      codec: MessageCodec, response: ResponseMetadata?, values: [ObjectIdentifier: any Sendable]
    ) {
      self.method = method
      self.metadata = metadata
      self.deadline = deadline
      self.peer = peer
      self.rpcProtocol = rpcProtocol
      self.codec = codec
      self.values = values
      if let response { _ = self.response.storeIfNil(response) }
    }

    /// The response metadata, made now if nobody has asked before (the same object for all).
    var responseMetadata: ResponseMetadata {
      if let response = response.load() { return response }
      return response.storeIfNil(ResponseMetadata())
    }
  }

  private var storage: Storage

  /// The full method path, such as `/grpc.health.v1.Health/Check`.
  public var method: String { storage.method }
  /// The request metadata (custom headers; reserved gRPC and HTTP/2 headers are not included).
  public var metadata: Metadata { storage.metadata }
  /// When the caller stops waiting, from `grpc-timeout`; `nil` when the caller set none.
  public var deadline: ContinuousClock.Instant? { storage.deadline }
  /// The caller's address, such as `ipv4:127.0.0.1:53122`, or `in-process`.
  public var peer: String { storage.peer }
  /// Metadata the handler wants sent back: initial metadata and trailing metadata.
  ///
  /// Made on first use: a call whose handler sends no metadata allocates none.
  public var response: ResponseMetadata { storage.responseMetadata }
  /// The protocol the call arrived in.
  public var rpcProtocol: RPCProtocol { storage.rpcProtocol }
  /// How the call's messages are encoded; typed handlers decode and encode with it
  /// (``MessageCoding``).
  public var codec: MessageCodec { storage.codec }

  /// The initial metadata the handler set, without making a ``ResponseMetadata`` when it set none.
  package var responseInitial: Metadata { storage.response.load()?.initial ?? [:] }
  /// The trailing metadata the handler set, without making a ``ResponseMetadata`` when it set none.
  package var responseTrailing: Metadata { storage.response.load()?.trailing ?? [:] }

  /// Creates a context; transports and tests call this.
  ///
  /// - Parameters:
  ///   - method: The full method path.
  ///   - metadata: The request metadata.
  ///   - deadline: The caller's deadline, if any.
  ///   - peer: The caller's address.
  ///   - response: Where the handler's response metadata goes; `nil` makes one on first use.
  ///   - rpcProtocol: The protocol the call arrived in.
  ///   - codec: How the call's messages are encoded.
  public init(
    method: String, metadata: Metadata, deadline: ContinuousClock.Instant?, peer: String,
    response: ResponseMetadata? = nil, rpcProtocol: RPCProtocol = .grpc, codec: MessageCodec = .protobuf
  ) {
    storage = Storage(
      method: method, metadata: metadata, deadline: deadline, peer: peer, rpcProtocol: rpcProtocol, codec: codec,
      response: response, values: [:])
  }

  /// The service part of ``method``, such as `grpc.health.v1.Health`.
  public var service: Substring {
    let path = method.dropFirst()
    return path.firstIndex(of: "/").map { path[..<$0] } ?? path
  }

  /// A typed value attached by an interceptor, or `nil`.
  public subscript<Key: ServerContextKey>(_ key: Key.Type) -> Key.Value? {
    get { storage.values[ObjectIdentifier(key)] as? Key.Value }
    set {
      if !isKnownUniquelyReferenced(&storage) {
        // Copies made before stay as they were. The response metadata is the call's: made now,
        // so that every copy writes to the same one.
        storage = Storage(
          method: storage.method, metadata: storage.metadata, deadline: storage.deadline, peer: storage.peer,
          rpcProtocol: storage.rpcProtocol, codec: storage.codec, response: storage.responseMetadata,
          values: storage.values)
      }
      storage.values[ObjectIdentifier(key)] = newValue
    }
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
