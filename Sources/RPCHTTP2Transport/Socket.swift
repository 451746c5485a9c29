import CLinuxShims
import Glibc

/// A failure to set up sockets (resolve, bind, listen, connect).
public struct SocketError: Error, CustomStringConvertible, Sendable {
  /// What failed, with the system error text.
  public let description: String

  static func system(_ what: String, _ code: Int32) -> SocketError {
    SocketError(description: "\(what): \(String(cString: strerror(code)))")
  }
}

/// A resolved IPv4 or IPv6 socket address.
struct ResolvedAddress {
  var storage = sockaddr_storage()
  var length: socklen_t = 0
  var family: Int32 { Int32(storage.ss_family) }

  /// Resolves `host` (a name or numeric address) and `port`.
  static func resolve(host: String, port: Int) throws -> ResolvedAddress {
    var hints = addrinfo()
    hints.ai_family = AF_UNSPEC
    hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
    hints.ai_flags = AI_NUMERICSERV
    var result: UnsafeMutablePointer<addrinfo>?
    let status = getaddrinfo(host, String(port), &hints, &result)
    guard status == 0, let info = result else {
      throw SocketError(description: "cannot resolve \(host): \(String(cString: gai_strerror(status)))")
    }
    defer { freeaddrinfo(result) }
    var address = ResolvedAddress()
    withUnsafeMutableBytes(of: &address.storage) { raw in
      raw.copyMemory(from: UnsafeRawBufferPointer(start: info.pointee.ai_addr, count: Int(info.pointee.ai_addrlen)))
    }
    address.length = info.pointee.ai_addrlen
    return address
  }

  /// `ipv4:1.2.3.4:80` / `ipv6:[::1]:80`, as gRPC names peers.
  var grpcDescription: String {
    var copy = storage
    return withUnsafePointer(to: &copy) { pointer in
      pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { Self.describe($0) }
    }
  }

  var port: Int {
    var copy = storage
    return withUnsafePointer(to: &copy) { pointer in
      if family == AF_INET6 {
        return pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin6_port)) }
      }
      return pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin_port)) }
    }
  }

  static func describe(_ address: UnsafePointer<sockaddr>) -> String {
    var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
    if Int32(address.pointee.sa_family) == AF_INET6 {
      return address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { in6 in
        var addr = in6.pointee.sin6_addr
        inet_ntop(AF_INET6, &addr, &text, socklen_t(text.count))
        return "ipv6:[\(Self.string(text))]:\(UInt16(bigEndian: in6.pointee.sin6_port))"
      }
    }
    return address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { in4 in
      var addr = in4.pointee.sin_addr
      inet_ntop(AF_INET, &addr, &text, socklen_t(text.count))
      return "ipv4:\(Self.string(text)):\(UInt16(bigEndian: in4.pointee.sin_port))"
    }
  }

  private static func string(_ text: [CChar]) -> String {
    String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
  }

  /// The local address of a socket.
  static func local(of fd: Int32) -> ResolvedAddress {
    var address = ResolvedAddress()
    address.length = socklen_t(MemoryLayout<sockaddr_storage>.size)
    withUnsafeMutablePointer(to: &address.storage) { pointer in
      pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { _ = getsockname(fd, $0, &address.length) }
    }
    return address
  }
}

enum Sockets {
  /// Creates `count` listening sockets bound with SO_REUSEPORT to one address; port 0 picks a free
  /// port for the first and reuses it for the others. A single socket does without SO_REUSEPORT,
  /// so that it never shares its port with another program's SO_REUSEPORT sockets (grpcio sets it).
  static func listen(host: String, port: Int, count: Int, backlog: Int32) throws -> (fds: [Int32], port: Int) {
    var fds: [Int32] = []
    var boundPort = port
    if port != 0 { try checkPortIsFree(host: host, port: port) }
    do {
      for _ in 0..<max(1, count) {
        var address = try ResolvedAddress.resolve(host: host, port: boundPort)
        let fd = clinux_tcp_socket(address.family)
        guard fd >= 0 else { throw SocketError.system("socket", errno) }
        fds.append(fd)
        guard clinux_set_reuse(fd, count > 1 ? 1 : 0) == 0 else { throw SocketError.system("setsockopt", errno) }
        let bound = withUnsafePointer(to: &address.storage) { pointer in
          pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, address.length) }
        }
        guard bound == 0 else { throw SocketError.system("bind \(host):\(boundPort)", errno) }
        guard Glibc.listen(fd, backlog) == 0 else { throw SocketError.system("listen", errno) }
        boundPort = ResolvedAddress.local(of: fd).port
      }
    } catch {
      for fd in fds { close(fd) }
      throw error
    }
    return (fds, boundPort)
  }

  /// Fails with "address in use" when anything listens on the port, even another process's
  /// SO_REUSEPORT socket that our own SO_REUSEPORT sockets would otherwise silently share.
  static func checkPortIsFree(host: String, port: Int) throws {
    var address = try ResolvedAddress.resolve(host: host, port: port)
    let fd = clinux_tcp_socket(address.family)
    guard fd >= 0 else { throw SocketError.system("socket", errno) }
    defer { close(fd) }
    var one: Int32 = 1
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
    let bound = withUnsafePointer(to: &address.storage) { pointer in
      pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, address.length) }
    }
    guard bound == 0 else { throw SocketError.system("bind \(host):\(port)", errno) }
  }

  /// The peer address of a connected socket, as gRPC names it.
  static func peer(of fd: Int32) -> String {
    var storage = sockaddr_storage()
    var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
    return withUnsafeMutablePointer(to: &storage) { pointer in
      pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
        guard getpeername(fd, address, &length) == 0 else { return "unknown" }
        return ResolvedAddress.describe(address)
      }
    }
  }
}
