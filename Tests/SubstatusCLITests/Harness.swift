import Foundation
import RPCCore
import SubstatusCLI
import SubstatusClock
import Synchronization

/// What one CLI run printed and returned.
struct CLIRun: Sendable {
  var status: Int32
  var stdout: String
  var stderr: String
  /// The addresses the CLI connected to.
  var connected: [String]
}

private final class Capture: Sendable {
  let stdout = Mutex("")
  let stderr = Mutex("")
  let connected = Mutex<[String]>([])
}

/// Runs the CLI in process. Without a transport, connecting fails with `UNAVAILABLE`.
func runCLI(
  _ arguments: [String], variables: [String: String] = ["SUBSTATUS_API_KEY": "sk_test"],
  stdin: [UInt8] = [], transport: (any ClientTransport)? = nil, clock: any ServiceClock = SystemClock()
) async -> CLIRun {
  let capture = Capture()
  let environment = CLIEnvironment(
    variables: variables,
    standardOutput: { text in capture.stdout.withLock { $0 += text } },
    standardError: { text in capture.stderr.withLock { $0 += text } },
    readStandardInput: { stdin },
    connect: { address in
      capture.connected.withLock { $0.append(address) }
      guard let transport else {
        throw RPCError(code: .unavailable, message: "connection refused (\(address))")
      }
      return transport
    }, clock: clock)
  let status = await SubstatusCLI.run(arguments, environment: environment)
  return CLIRun(
    status: status, stdout: capture.stdout.withLock { $0 }, stderr: capture.stderr.withLock { $0 },
    connected: capture.connected.withLock { $0 })
}

/// The path of a test fixture.
func fixture(_ name: String) -> String {
  let url = Bundle.module.url(forResource: "Fixtures/\(name)", withExtension: nil)
  return url?.path ?? "missing-fixture-\(name)"
}

/// The bytes of a test fixture.
func fixtureBytes(_ name: String) throws -> [UInt8] {
  [UInt8](try Data(contentsOf: URL(fileURLWithPath: fixture(name))))
}
