import SubstatusDaemon
import Testing

/// The gRPC listener's per-connection limits: defaults, config file, environment, flags.
@Suite struct ConnectionLimitConfigurationTests {
  @Test func defaultsHoldOnASmallMachine() throws {
    let c = try #require(try DaemonConfiguration.parse(arguments: ["--data-dir", "/d"], environment: [:]))
    #expect(c.grpcIdleTimeout == 300)
    #expect(c.grpcHandshakeTimeout == 10)
    #expect(c.grpcWriteTimeout == 60)
    #expect(c.grpcConnectionRequestBuffer == 8 << 20)
    #expect(c.grpcRequestBuffer == 256 << 20)
  }

  @Test func fileEnvironmentAndFlags() throws {
    let file: [UInt8] = Array(#"{"data_dir": "/d", "grpc_idle_timeout": 30, "grpc_write_timeout": "5"}"#.utf8)
    let c = try #require(
      try DaemonConfiguration.parse(
        arguments: ["--config", "c.json", "--grpc-connection-request-buffer", "5000000", "--grpc-idle-timeout=0"],
        environment: ["SUBSTATUS_GRPC_HANDSHAKE_TIMEOUT": "2.5", "SUBSTATUS_GRPC_REQUEST_BUFFER": "67108864"],
        readFile: { _ in file }))
    #expect(c.grpcIdleTimeout == 0)  // off
    #expect(c.grpcWriteTimeout == 5)
    #expect(c.grpcHandshakeTimeout == 2.5)
    #expect(c.grpcConnectionRequestBuffer == 5_000_000)
    #expect(c.grpcRequestBuffer == 64 << 20)
  }

  @Test(arguments: [
    (["--grpc-idle-timeout", "-1"], "--grpc-idle-timeout must be a non-negative number"),
    (["--grpc-handshake-timeout", "0"], "--grpc-handshake-timeout must be positive"),
    (["--grpc-connection-request-buffer", "1000"], "--grpc-connection-request-buffer must be a whole number of bytes"),
    (["--grpc-request-buffer", "1e7.5"], "--grpc-request-buffer must be a non-negative number"),
  ])
  func badLimits(arguments: [String], message: String) {
    #expect {
      try DaemonConfiguration.parse(arguments: ["--data-dir", "/d"] + arguments, environment: [:])
    } throws: { error in
      (error as? DaemonConfiguration.UsageError)?.description.contains(message) == true
    }
  }
}
