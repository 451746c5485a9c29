import Testing
@testable import SubstatusDaemon

/// The flags of the listener and process limits, and how the descriptors are shared.
@Suite struct LimitsConfigurationTests {
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

  @Test func flagsOverrideTheDerivedCaps() throws {
    let c = try #require(try DaemonConfiguration.parse(
      arguments: [
        "--data-dir", "/d", "--grpc-max-connections", "50", "--http-max-connections", "20", "--grpc-max-calls", "300",
        "--grpc-max-reply-bytes", "1048576", "--http-max-connections-per-address", "4", "--http-request-head-timeout", "2.5",
        "--memory-trim-interval", "0", "--reserved-descriptors", "64",
      ], environment: [:]))
    #expect(DescriptorBudget(openFilesLimit: 1024, configuration: c) == DescriptorBudget(grpcConnections: 50, httpConnections: 20))
    #expect(c.grpcMaxCalls == 300)
    #expect(c.grpcMaxReplyBytes == 1 << 20)
    #expect(c.httpMaxConnectionsPerAddress == 4)
    #expect(c.httpRequestHeadTimeout == 2.5)
    #expect(c.memoryTrimInterval == 0)
    #expect(c.reservedDescriptors == 64)
    let defaults = try #require(try DaemonConfiguration.parse(arguments: ["--data-dir", "/d"], environment: [:]))
    #expect(defaults.grpcMaxConnections == nil && defaults.httpMaxConnections == nil)
    #expect(defaults.grpcMaxCalls == 1024 && defaults.httpMaxConnectionsPerAddress == 16)
  }

  @Test(arguments: [
    (["--grpc-max-connections", "0"], "--grpc-max-connections must be a whole number"),
    (["--grpc-max-calls", "1.5"], "--grpc-max-calls must be a whole number"),
    (["--grpc-max-reply-bytes", "100"], "--grpc-max-reply-bytes must be a whole number"),
    (["--http-request-head-timeout", "0"], "--http-request-head-timeout must be at least 0.1 seconds"),
    (["--reserved-descriptors", "2"], "--reserved-descriptors must be a whole number"),
  ])
  func badLimitFlagsAreUsageErrors(arguments: [String], message: String) {
    let error = #expect(throws: DaemonConfiguration.UsageError.self) {
      try DaemonConfiguration.parse(arguments: ["--data-dir", "/d"] + arguments, environment: [:])
    }
    #expect(error?.description.contains(message) == true, "\(error?.description ?? "")")
  }
}
