import Testing
@testable import SubstatusDaemon

/// The flags of the listener and process limits (defaults, config file, environment, flags),
/// and how the descriptors are shared.
@Suite struct LimitsConfigurationTests {
  @Test func connectionLimitDefaultsHoldOnASmallMachine() throws {
    let c = try #require(try DaemonConfiguration.parse(arguments: ["--data-dir", "/d"], environment: [:]))
    #expect(c.grpcIdleTimeout == 300)
    #expect(c.grpcHandshakeTimeout == 10)
    #expect(c.grpcWriteTimeout == 60)
    #expect(c.grpcConnectionRequestBuffer == 8 << 20)
    #expect(c.grpcRequestBuffer == 256 << 20)
  }

  @Test(arguments: [
    // arguments, environment, expected limit (nil: a usage error)
    ([String](), [String: String](), 128 << 20 as Int?),
    (["--max-working-set-bytes", "0"], [:], 0),
    (["--max-working-set-bytes", "268435456"], [:], 256 << 20),
    ([], ["SUBSTATUS_MAX_WORKING_SET_BYTES": "67108864"], 64 << 20),
    (["--max-working-set-bytes", "1000"], [:], nil),
    (["--max-working-set-bytes", "-1"], [:], nil),
  ])
  func workingSetBudgetFlag(arguments: [String], environment: [String: String], expected: Int?) throws {
    if let expected {
      let c = try #require(try DaemonConfiguration.parse(arguments: ["--data-dir", "/d"] + arguments, environment: environment))
      #expect(c.maxWorkingSetBytes == expected)
    } else {
      #expect(throws: DaemonConfiguration.UsageError.self) {
        try DaemonConfiguration.parse(arguments: ["--data-dir", "/d"] + arguments, environment: environment)
      }
    }
  }

  @Test func connectionLimitsFromFileEnvironmentAndFlags() throws {
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
    // open-files limit, reserve, expected gRPC cap, expected HTTP cap
    (1024, 128, 672, 224),
    (256, 128, 96, 32),
    (65536, 128, 4096, 1024),
    (100, 128, 24, 8),
  ])
  func descriptorsAreSharedBelowTheLimit(limit: Int, reserve: Int, grpc: Int, http: Int) throws {
    var configuration = DaemonConfiguration()
    configuration.reservedDescriptors = reserve
    let budget = DescriptorBudget(openFilesLimit: limit, configuration: configuration)
    #expect(budget == DescriptorBudget(grpcConnections: grpc, httpConnections: http))
    if limit > reserve + 32 { #expect(budget.fits(openFilesLimit: limit, reserved: reserve)) }
  }

  @Test func trustedProxiesFromFlagsEnvironmentAndFile() throws {
    let none = try #require(try DaemonConfiguration.parse(arguments: ["--data-dir", "/d"], environment: [:]))
    #expect(none.trustedProxies.isEmpty)
    let flags = try #require(try DaemonConfiguration.parse(
      arguments: ["--data-dir", "/d", "--trusted-proxies", "127.0.0.1/32, 10.1.2.3/8", "--trusted-proxies", "::1"],
      environment: [:]))
    #expect(flags.trustedProxies == ["127.0.0.1/32", "10.0.0.0/8", "::1/128"])
    let env = try #require(try DaemonConfiguration.parse(
      arguments: ["--data-dir", "/d"], environment: ["SUBSTATUS_TRUSTED_PROXIES": "192.0.2.0/24,2001:db8::/32"]))
    #expect(env.trustedProxies == ["192.0.2.0/24", "2001:db8::/32"])
    let file: [UInt8] = Array(#"{"data_dir": "/d", "trusted_proxies": ["127.0.0.1", "10.0.0.0/8"]}"#.utf8)
    let fromFile = try #require(try DaemonConfiguration.parse(arguments: ["--config", "c.json"], environment: [:], readFile: { _ in file }))
    #expect(fromFile.trustedProxies == ["127.0.0.1/32", "10.0.0.0/8"])
  }

  @Test(arguments: ["", "10.0.0.0/33", "proxy.example.com", "127.0.0.1,,10.0.0.0/8", "10.0.0.0/8 10.1.0.0/16"])
  func rejectsBadTrustedProxies(value: String) {
    #expect(throws: DaemonConfiguration.UsageError.self) {
      try DaemonConfiguration.parse(arguments: ["--data-dir", "/d", "--trusted-proxies", value], environment: [:])
    }
  }

  @Test func flagsOverrideTheDerivedCaps() throws {
    let c = try #require(try DaemonConfiguration.parse(
      arguments: [
        "--data-dir", "/d", "--grpc-max-connections", "50", "--http-max-connections", "20", "--grpc-max-calls", "300",
        "--grpc-max-reply-bytes", "1048576", "--http-max-connections-per-address", "4", "--http-request-head-timeout", "2.5",
        "--memory-trim-interval", "0", "--reserved-descriptors", "64", "--history-cache-mb", "16", "--postgres-pool-size", "12",
      ], environment: [:]))
    #expect(DescriptorBudget(openFilesLimit: 1024, configuration: c) == DescriptorBudget(grpcConnections: 50, httpConnections: 20))
    #expect(c.grpcMaxCalls == 300)
    #expect(c.grpcMaxReplyBytes == 1 << 20)
    #expect(c.httpMaxConnectionsPerAddress == 4)
    #expect(c.httpRequestHeadTimeout == 2.5)
    #expect(c.memoryTrimInterval == 0)
    #expect(c.reservedDescriptors == 64)
    #expect(c.historyCacheMB == 16)
    #expect(c.postgresPoolSize == 12)
    let defaults = try #require(try DaemonConfiguration.parse(arguments: ["--data-dir", "/d"], environment: [:]))
    #expect(defaults.grpcMaxConnections == nil && defaults.httpMaxConnections == nil)
    #expect(defaults.grpcMaxCalls == 1024 && defaults.httpMaxConnectionsPerAddress == 16)
    #expect(defaults.historyCacheMB == 0)
    #expect(defaults.postgresPoolSize == 4)
  }

  @Test(arguments: [
    (["--grpc-max-connections", "0"], "--grpc-max-connections must be a whole number"),
    (["--grpc-max-calls", "1.5"], "--grpc-max-calls must be a whole number"),
    (["--grpc-max-reply-bytes", "100"], "--grpc-max-reply-bytes must be a whole number"),
    (["--http-request-head-timeout", "0"], "--http-request-head-timeout must be at least 0.1 seconds"),
    (["--reserved-descriptors", "2"], "--reserved-descriptors must be a whole number"),
    (["--grpc-idle-timeout", "-1"], "--grpc-idle-timeout must be a non-negative number"),
    (["--grpc-handshake-timeout", "0"], "--grpc-handshake-timeout must be positive"),
    (["--grpc-connection-request-buffer", "1000"], "--grpc-connection-request-buffer must be a whole number of bytes"),
    (["--grpc-request-buffer", "1e7.5"], "--grpc-request-buffer must be a non-negative number"),
    (["--history-cache-mb", "1.5"], "--history-cache-mb must be a whole number"),
    (["--postgres-pool-size", "0"], "--postgres-pool-size must be"),
  ])
  func badLimitFlagsAreUsageErrors(arguments: [String], message: String) {
    let error = #expect(throws: DaemonConfiguration.UsageError.self) {
      try DaemonConfiguration.parse(arguments: ["--data-dir", "/d"] + arguments, environment: [:])
    }
    #expect(error?.description.contains(message) == true, "\(error?.description ?? "")")
  }

  @Test(arguments: [
    // arguments, environment, expected cap, expected CA file
    ([String](), [String: String](), 64, String?.none),
    (["--reserved-descriptors", "300"], [:], 150, nil),
    (["--outbound-max-connections", "20", "--outbound-ca-file", "/etc/ca.pem"], [:], 20, "/etc/ca.pem"),
    ([], ["SUBSTATUS_OUTBOUND_MAX_CONNECTIONS": "12", "SUBSTATUS_OUTBOUND_CA_FILE": "/x.pem"], 12, "/x.pem"),
  ])
  func outboundConnectionsFitTheReserve(
    arguments: [String], environment: [String: String], cap: Int, caFile: String?
  ) throws {
    let c = try #require(try DaemonConfiguration.parse(arguments: ["--data-dir", "/d"] + arguments, environment: environment))
    #expect(c.outboundConnections == cap)
    #expect(c.outboundCAFile == caFile)
  }

  @Test(arguments: ["0", "1", "x", "100001"])
  func outboundMaxConnectionsOutOfRangeIsAUsageError(value: String) {
    #expect(throws: (any Error).self) {
      _ = try DaemonConfiguration.parse(arguments: ["--data-dir", "/d", "--outbound-max-connections", value], environment: [:])
    }
  }
}
