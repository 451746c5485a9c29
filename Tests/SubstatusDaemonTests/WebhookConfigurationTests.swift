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

  /// The webhook caps and the per-tenant share of POSTs in flight: flag, environment, config file.
  @Test(arguments: [
    ("--max-webhooks-per-app", "SUBSTATUS_MAX_WEBHOOKS_PER_APP", "max_webhooks_per_app", 16),
    ("--max-webhooks-per-tenant", "SUBSTATUS_MAX_WEBHOOKS_PER_TENANT", "max_webhooks_per_tenant", 256),
    ("--webhook-max-in-flight-per-tenant", "SUBSTATUS_WEBHOOK_MAX_IN_FLIGHT_PER_TENANT", "webhook_max_in_flight_per_tenant", 32),
  ])
  func webhookLimits(flag: String, env: String, key: String, byDefault: Int) throws {
    func value(_ c: DaemonConfiguration) -> Int {
      switch flag {
      case "--max-webhooks-per-app": c.maxWebhooksPerApp
      case "--max-webhooks-per-tenant": c.maxWebhooksPerTenant
      default: c.webhookMaxInFlightPerTenant
      }
    }
    #expect(value(try Self.parse([])) == byDefault)
    #expect(value(try Self.parse([flag, "3"])) == 3)
    #expect(value(try Self.parse([], environment: [env: "5"])) == 5)
    #expect(value(try Self.parse([], file: "{\"\(key)\": 7}")) == 7)
    #expect(throws: DaemonConfiguration.UsageError.self) { _ = try Self.parse([flag, "0"]) }
    #expect(throws: DaemonConfiguration.UsageError.self) { _ = try Self.parse([flag, "many"]) }
    #expect(DaemonConfiguration.help.contains(flag))
  }
}
