import Testing

@testable import SubstatusDaemon

/// `--allow-private-webhooks`: a switch (no value), or `true`/`false` in the environment and the
/// config file; off by default.
@Suite struct WebhookConfigurationTests {
  static func parse(_ arguments: [String], environment: [String: String] = [:], file: String? = nil) throws
    -> DaemonConfiguration
  {
    let bytes = Array((file ?? "{}").utf8)
    return try #require(
      try DaemonConfiguration.parse(
        arguments: ["--data-dir", "/d"] + (file == nil ? [] : ["--config", "c.json"]) + arguments,
        environment: environment, readFile: { _ in bytes }))
  }

  @Test func offByDefault() throws {
    #expect(try Self.parse([]).allowPrivateWebhooks == false)
  }

  @Test func theSwitchTakesNoValue() throws {
    let c = try Self.parse(["--allow-private-webhooks", "--grpc-listen", "127.0.0.1:0"])
    #expect(c.allowPrivateWebhooks)
    #expect(c.grpcListen == "127.0.0.1:0", "the next flag is not taken as its value")
    #expect(try Self.parse(["--allow-private-webhooks=false"]).allowPrivateWebhooks == false)
  }

  @Test func fromTheEnvironmentAndTheConfigFile() throws {
    #expect(try Self.parse([], environment: ["SUBSTATUS_ALLOW_PRIVATE_WEBHOOKS": "true"]).allowPrivateWebhooks)
    #expect(try Self.parse([], file: #"{"allow_private_webhooks": true}"#).allowPrivateWebhooks)
    #expect(
      try Self.parse([], environment: ["SUBSTATUS_ALLOW_PRIVATE_WEBHOOKS": "false"], file: #"{"allow_private_webhooks": true}"#)
        .allowPrivateWebhooks == false)
    #expect(throws: DaemonConfiguration.UsageError.self) {
      _ = try Self.parse([], environment: ["SUBSTATUS_ALLOW_PRIVATE_WEBHOOKS": "maybe"])
    }
  }

  @Test func helpNamesIt() {
    #expect(DaemonConfiguration.help.contains("--allow-private-webhooks"))
  }
}
