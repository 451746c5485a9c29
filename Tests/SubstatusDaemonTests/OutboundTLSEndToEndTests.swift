import Foundation
import HTTPServer
import RPCCore
import SubstatusWire
import Testing

@testable import SubstatusDaemon

/// `--outbound-ca-file`: a webhook receiver over HTTPS with a certificate no system root signs
/// (`Fixtures/outbound-receiver-cert.pem`, for `localhost`) is delivered to when substatusd trusts
/// that file, and refused as a TLS failure when it does not (certificates are always verified).
@Suite(.serialized) struct OutboundTLSEndToEndTests {
  @Test(arguments: [true, false])
  func webhookOverHTTPSWithThePrivateCA(trusted: Bool) async throws {
    let fixtures = packageRoot.appendingPathComponent("Tests/SubstatusDaemonTests/Fixtures")
    let certificate = fixtures.appendingPathComponent("outbound-receiver-cert.pem").path
    var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0)
    configuration.tls = HTTPServerTLS(
      certificateChainPEM: try String(contentsOfFile: certificate, encoding: .utf8),
      privateKeyPEM: try String(
        contentsOfFile: fixtures.appendingPathComponent("outbound-receiver-key.pem").path, encoding: .utf8))
    let receiver = try HTTPServer(configuration: configuration) { _ in HTTPResponse(status: 204) }
    let arguments = ["--refresh-interval", "0", "--allow-private-webhooks"] + (trusted ? ["--outbound-ca-file", certificate] : [])
    let daemon = try await RunningDaemon(extraArguments: arguments)
    defer { daemon.abandon() }
    let client = try DaemonClient(daemon)
    let (admin, app) = try await client.makeApp(operatorKey: daemon.operatorKey, bundleID: "com.example.tls", appleAppID: 0)
    var create = Substatus_V1_CreateWebhookRequest()
    create.appID = app
    create.url = "https://localhost:\(receiver.port)/hook"
    let webhook = try #require(try await client.call(Substatus_V1_EventService.createWebhook, create, key: admin).webhook)
    var test = Substatus_V1_TestWebhookRequest()
    test.appID = app
    test.webhookID = webhook.webhookID
    let answer = try await client.call(Substatus_V1_EventService.testWebhook, test, key: admin)
    let attempt = try #require(answer.attempt)
    if trusted {
      #expect(answer.delivered)
      #expect(attempt.httpStatus == 204)
    } else {
      #expect(!answer.delivered)
      #expect(attempt.httpStatus == 0)
      #expect(attempt.error.hasPrefix("TLS failure: "), "\(attempt.error)")
    }
    await receiver.stop(gracePeriod: .seconds(1))
  }

  /// No proxy is ever used for outbound HTTP, whatever the environment names: a webhook POST goes
  /// to its receiver although every proxy variable points at a closed port.
  @Test func aProxyInTheEnvironmentIsNeverUsed() async throws {
    let receiver = try HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0)) { _ in
      HTTPResponse(status: 204)
    }
    let proxy = "http://127.0.0.1:9"
    let environment = [
      "http_proxy": proxy, "https_proxy": proxy, "HTTPS_PROXY": proxy, "all_proxy": proxy, "ALL_PROXY": proxy,
    ]
    let daemon = try await RunningDaemon(extraArguments: ["--refresh-interval", "0", "--allow-private-webhooks"], environment: environment)
    defer { daemon.abandon() }
    let client = try DaemonClient(daemon)
    let (admin, app) = try await client.makeApp(operatorKey: daemon.operatorKey, bundleID: "com.example.proxy", appleAppID: 0)
    var create = Substatus_V1_CreateWebhookRequest()
    create.appID = app
    create.url = "http://127.0.0.1:\(receiver.port)/hook"
    let webhook = try #require(try await client.call(Substatus_V1_EventService.createWebhook, create, key: admin).webhook)
    var test = Substatus_V1_TestWebhookRequest()
    test.appID = app
    test.webhookID = webhook.webhookID
    let answer = try await client.call(Substatus_V1_EventService.testWebhook, test, key: admin)
    #expect(answer.delivered, "\(answer.attempt?.error ?? "")")
    #expect(answer.attempt?.httpStatus == 204)
    await receiver.stop(gracePeriod: .seconds(1))
  }
}
