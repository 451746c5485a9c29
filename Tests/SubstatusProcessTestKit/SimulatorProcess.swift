import Foundation

/// An `appstore-sim` started by a test on a free port with a frozen clock (it moves only through
/// the control API), in its own temporary directory.
public final class SimulatorProcess: Sendable {
  /// Its address, `127.0.0.1:PORT`.
  public let address: String
  private let child: ChildProcess
  private let directory: URL

  /// Starts `appstore-sim --time-scale 0 --start-ms startMs` and waits for its ready file.
  public init(startMs: Int64, extraArguments: [String] = [], timeout: Duration = .seconds(30)) async throws {
    directory = FileManager.default.temporaryDirectory.appendingPathComponent("appstore-sim-\(UUID().uuidString)")
    child = try ChildProcess(
      ServerProcess.binDirectory.appendingPathComponent("appstore-sim").path,
      [
        "--listen", "127.0.0.1:0", "--ready-file", directory.appendingPathComponent("ready.json").path,
        "--time-scale", "0", "--start-ms", String(startMs),
      ] + extraArguments, directory: directory)
    let ready = try await child.readyFile(directory.appendingPathComponent("ready.json"), timeout: timeout)
    guard let found = ready["http"] else {
      await child.stop()
      throw ServerProcessError(message: "appstore-sim's ready file names no address")
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
    await child.stop(killingAfter: .seconds(5))
    try? FileManager.default.removeItem(at: directory)
  }
}
