import SubstatusDaemon
import Testing

@Suite struct ServerAPIConfigurationTests {
  @Test("App Store Server API URLs and the reconcile interval: defaults, file, environment, flags")
  func serverAPISettings() throws {
    let defaults = try #require(try DaemonConfiguration.parse(arguments: ["--data-dir", "/d"], environment: [:]))
    #expect(defaults.appStoreServerAPIProductionURL == "https://api.storekit.apple.com")
    #expect(defaults.appStoreServerAPISandboxURL == "https://api.storekit-sandbox.apple.com")
    #expect(defaults.reconcileInterval == 3600)
    let file: [UInt8] = Array(
      #"{"data_dir": "/d", "app_store_server_api_production_url": "http://127.0.0.1:9/", "reconcile_interval": 60}"#.utf8)
    let c = try #require(
      try DaemonConfiguration.parse(
        arguments: ["--config", "c.json", "--reconcile-interval", "0"],
        environment: ["SUBSTATUS_APP_STORE_SERVER_API_SANDBOX_URL": "http://127.0.0.1:9/sandbox"],
        readFile: { _ in file }))
    #expect(c.appStoreServerAPIProductionURL == "http://127.0.0.1:9/")
    #expect(c.appStoreServerAPISandboxURL == "http://127.0.0.1:9/sandbox")
    #expect(c.reconcileInterval == 0)  // off
  }

  @Test(arguments: [
    (["--reconcile-interval", "-5"], "--reconcile-interval must be a non-negative number"),
    (["--app-store-server-api-production-url", "ftp://x"], "--app-store-server-api-production-url must be an http(s) URL"),
    (["--app-store-server-api-sandbox-url", "nohost"], "--app-store-server-api-sandbox-url must be an http(s) URL"),
  ])
  func badServerAPISettings(arguments: [String], message: String) {
    #expect {
      try DaemonConfiguration.parse(arguments: ["--data-dir", "/d"] + arguments, environment: [:])
    } throws: { error in
      (error as? DaemonConfiguration.UsageError)?.description.contains(message) == true
    }
  }
}
