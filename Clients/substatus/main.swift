// The `substatus` command-line client; the logic lives in SubstatusCLI.
import Foundation
import RPCCore
import RPCHTTP2Transport
import SubstatusCLI
import SubstatusClient

let environment = CLIEnvironment(
  variables: ProcessInfo.processInfo.environment,
  // A closed pipe (`substatus app list | head -1`) must not crash the program: write errors are
  // dropped (SIGPIPE is ignored by the transport).
  standardOutput: { try? FileHandle.standardOutput.write(contentsOf: Data($0.utf8)) },
  standardError: { try? FileHandle.standardError.write(contentsOf: Data($0.utf8)) },
  readStandardInput: { [UInt8](FileHandle.standardInput.readDataToEndOfFile()) },
  connect: { address throws -> any ClientTransport in
    let (host, port) = try SubstatusClient.parseAddress(address)
    var configuration = HTTP2ClientTransport.Configuration(host: host, port: port)
    configuration.connectTimeout = .seconds(5)
    return try HTTP2ClientTransport(configuration: configuration)
  },
  connectTLS: { address, options throws -> any ClientTransport in
    let (host, port) = try SubstatusClient.parseAddress(address)
    var configuration = HTTP2ClientTransport.Configuration(host: host, port: port)
    configuration.connectTimeout = .seconds(5)
    configuration.tls = ClientTLSConfiguration(
      caFilePath: options.caFile, certificateChainPath: options.clientCertificate,
      privateKeyPath: options.clientKey)
    return try HTTP2ClientTransport(configuration: configuration)
  })
// `events tail` streams until interrupted: Ctrl-C (SIGINT) ends it successfully. Its output is
// written as it comes (unbuffered), so nothing is lost by exiting at once.
let arguments = Array(CommandLine.arguments.dropFirst())
if let events = arguments.firstIndex(of: "events"), arguments.dropFirst(events + 1).first == "tail" {
  signal(SIGINT) { _ in _exit(0) }
}
exit(await SubstatusCLI.run(Array(CommandLine.arguments.dropFirst()), environment: environment))
