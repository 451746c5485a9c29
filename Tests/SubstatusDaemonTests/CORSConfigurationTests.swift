import Testing

@testable import SubstatusDaemon

/// `--cors-origin`: repeatable, from the config file, the environment and flags; origins checked
/// and written as browsers send them in `Origin`.
@Suite struct CORSConfigurationTests {
  @Test func noOriginByDefault() throws {
    let c = try #require(try DaemonConfiguration.parse(arguments: ["--data-dir", "/d"], environment: [:]))
    #expect(c.corsOrigins.isEmpty)
  }

  @Test func repeatedFlagsKeepEveryOriginOnce() throws {
    let c = try #require(
      try DaemonConfiguration.parse(
        arguments: [
          "--data-dir", "/d", "--cors-origin", "https://console.example.com", "--cors-origin=http://localhost:3000",
          "--cors-origin", "https://console.example.com",
        ], environment: [:]))
    #expect(c.corsOrigins == ["https://console.example.com", "http://localhost:3000"])
  }

  @Test func fromTheConfigFileAndTheEnvironment() throws {
    let file: [UInt8] = Array(#"{"data_dir": "/d", "cors_origin": ["https://a.example", "https://b.example:8443"]}"#.utf8)
    let fromFile = try #require(
      try DaemonConfiguration.parse(arguments: ["--config", "c.json"], environment: [:], readFile: { _ in file }))
    #expect(fromFile.corsOrigins == ["https://a.example", "https://b.example:8443"])
    let fromEnvironment = try #require(
      try DaemonConfiguration.parse(
        arguments: ["--config", "c.json"], environment: ["SUBSTATUS_CORS_ORIGIN": "http://[::1]:8000,https://c.example"],
        readFile: { _ in file }))
    #expect(fromEnvironment.corsOrigins == ["http://[::1]:8000", "https://c.example"])
  }

  @Test(arguments: [
    ("HTTPS://Console.Example.COM", "https://console.example.com"),
    ("https://console.example.com:443", "https://console.example.com"),
    ("http://localhost:80", "http://localhost"),
    ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
    ("https://console.example.com:80", "https://console.example.com:80"),
    ("app://x-y.z", "app://x-y.z"),
  ])
  func originsAreWrittenAsBrowsersSendThem(given: String, expected: String) throws {
    #expect(try DaemonConfiguration.corsOrigin(given) == expected)
  }

  @Test(arguments: [
    "*", "null", "", "console.example.com", "https://", "https://console.example.com/",
    "https://console.example.com/app", "https://user@console.example.com", "https://a.example:0",
    "https://a.example:99999", "https://a.example:x", "1http://a.example", "https://a b.example",
    "https://a.example?x=1",
  ])
  func notAnOriginIsAUsageError(value: String) throws {
    #expect(throws: DaemonConfiguration.UsageError.self) {
      try DaemonConfiguration.parse(arguments: ["--data-dir", "/d", "--cors-origin", value], environment: [:])
    }
  }

  @Test func theHTTPRequestBufferFlag() throws {
    let c = try #require(try DaemonConfiguration.parse(arguments: ["--data-dir", "/d"], environment: [:]))
    #expect(c.httpRequestBuffer == 64 << 20)
    let set = try #require(
      try DaemonConfiguration.parse(arguments: ["--data-dir", "/d", "--http-request-buffer", "8000000"], environment: [:]))
    #expect(set.httpRequestBuffer == 8_000_000)
    #expect(throws: DaemonConfiguration.UsageError.self) {
      try DaemonConfiguration.parse(arguments: ["--data-dir", "/d", "--http-request-buffer", "1000"], environment: [:])
    }
  }

  @Test func theHelpNamesTheFlag() {
    #expect(DaemonConfiguration.help.contains("--cors-origin ORIGIN"))
  }
}
