import Dispatch
import Foundation
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// A plain TCP connection to a test server on 127.0.0.1, for tests that must control exactly when
/// the client sends, reads and closes. Sending a short request and closing never block on loopback;
/// ``read(timeout:)`` waits on a Dispatch thread, never on the cooperative pool. Connecting blocks
/// only while the server's backlog is full: a test at the connection limit connects on a Dispatch
/// thread.
public final class RawConnection: Sendable {
  private let fd: Int32
  private let open = Mutex(true)

  /// Connects to `127.0.0.1:port`.
  public init(port: Int) throws {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw POSIXError(.EMFILE) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let connected = withUnsafePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
      }
    }
    guard connected == 0 else {
      Glibc.close(fd)
      throw POSIXError(.ECONNREFUSED)
    }
    self.fd = fd
  }

  /// Sends `text` (a request, written whole).
  public func send(_ text: String) { send(Array(text.utf8)) }

  /// Sends `bytes` (a short request: one `send`).
  public func send(_ bytes: [UInt8]) {
    _ = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
  }

  /// Reads what has arrived, waiting up to `timeout` for the first bytes; empty at the end or on
  /// timeout. Not after ``close(reset:)``.
  public func read(timeout: Duration = .seconds(5)) async -> [UInt8] {
    let fd = fd
    return await withCheckedContinuation { continuation in
      DispatchQueue.global().async {
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let milliseconds = Int32(timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
        guard poll(&poller, 1, milliseconds) == 1 else { return continuation.resume(returning: []) }
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        let count = recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT))
        continuation.resume(returning: count > 0 ? Array(buffer[..<count]) : [])
      }
    }
  }

  /// Closes the connection (once): a FIN when everything sent to it was read, else a reset; with
  /// `reset`, a reset in any case (`SO_LINGER` of 0).
  public func close(reset: Bool = false) {
    let wasOpen = open.withLock { open in
      defer { open = false }
      return open
    }
    guard wasOpen else { return }
    if reset {
      var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
      setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
    }
    Glibc.close(fd)
  }

  deinit { close() }
}
