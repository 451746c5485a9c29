import Foundation
import Testing

@testable import RPCHTTP2Transport

/// The loops share connections evenly: the kernel's `SO_REUSEPORT` hash alone put all of a few
/// connections on one loop often enough (all 4 of a client's on one of 2 loops one run in 8),
/// leaving the other core idle.
@Suite struct LoopBalanceTests {
  @Test func connectionsAreSpreadEvenlyOverTheLoops() async throws {
    try await withTestServer(threads: 2) { server in
      var sockets: [Int32] = []
      defer { for fd in sockets { close(fd) } }
      for n in 1...8 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #expect(fd >= 0)
        sockets.append(fd)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(server.port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
          $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        #expect(connected == 0)
        // One at a time: wait until this connection is being served.
        let end = ContinuousClock.now + .seconds(10)
        while server.transport.connectionsPerLoop.reduce(0, +) < n && ContinuousClock.now < end {
          try await Task.sleep(for: .milliseconds(2))
        }
      }
      #expect(server.transport.connectionsPerLoop == [4, 4])
    }
  }
}
