import Foundation

/// An `appstore-sim` started by a test on a free port with a frozen clock (it moves only through
/// the control API), in its own temporary directory.
public final class SimulatorProcess: @unchecked Sendable {
  /// Its address, `127.0.0.1:PORT`.
  public let address: String
  private let process: Process
  private let directory: URL

  /// Starts `appstore-sim --time-scale 0 --start-ms startMs` and waits for its ready file.
  public init(startMs: Int64, timeout: Duration = .seconds(30)) async throws {
    directory = FileManager.default.temporaryDirectory.appendingPathComponent("appstore-sim-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    let ready = directory.appendingPathComponent("ready.json")
    process = Process()
    process.executableURL = ServerProcess.binDirectory.appendingPathComponent("appstore-sim")
    process.arguments = [
      "--listen", "127.0.0.1:0", "--ready-file", ready.path, "--time-scale", "0", "--start-ms", String(startMs),
    ]
    process.standardOutput = FileHandle.nullDevice
    process.standardError = FileHandle.nullDevice
    try process.run()
    let clock = ContinuousClock()
    let deadline = clock.now + timeout
    var found: String?
    while clock.now < deadline && process.isRunning {
      if let data = try? Data(contentsOf: ready), !data.isEmpty,
        let object = try? JSONSerialization.jsonObject(with: data) as? [String: String]
      {
        found = object["http"]
        break
      }
      try await Task.sleep(for: .milliseconds(20))
    }
    guard let found else {
      if process.isRunning { process.terminate() }
      throw ServerProcessError(message: "appstore-sim did not become ready")
    }
    address = found
  }

  /// Its verifyReceipt URLs, as `substatusd` flags.
  public var verifyReceiptArguments: [String] {
    [
      "--verify-receipt-production-url", "http://\(address)/production/verifyReceipt",
      "--verify-receipt-sandbox-url", "http://\(address)/sandbox/verifyReceipt",
    ]
  }

  /// Stops it (SIGTERM, then SIGKILL after 5 s) and removes its directory.
  public func stop() async {
    if process.isRunning {
      process.terminate()
      let clock = ContinuousClock()
      let deadline = clock.now + .seconds(5)
      while process.isRunning && clock.now < deadline { try? await Task.sleep(for: .milliseconds(20)) }
      if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }
    try? FileManager.default.removeItem(at: directory)
  }
}
