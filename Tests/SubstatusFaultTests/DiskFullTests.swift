import Foundation
import SubstatusProcessTestKit
import RPCCore
import SubstatusClient
import SubstatusWire
import Testing

/// Runs `/bin/mount` or `/bin/umount` quietly; returns whether it succeeded.
@discardableResult
func runMount(_ executable: String, _ arguments: [String]) -> Bool {
  let process = Process()
  process.executableURL = URL(fileURLWithPath: executable)
  process.arguments = arguments
  process.standardOutput = FileHandle.nullDevice
  process.standardError = FileHandle.nullDevice
  do { try process.run() } catch { return false }
  process.waitUntilExit()
  return process.terminationStatus == 0
}

/// A small tmpfs: root only (CI runs as root). ``unmount()`` (lazy) must be called, in a `defer`.
struct SmallTmpfs {
  let directory: URL

  /// Whether this process may mount a tmpfs (tried once, on a throwaway directory).
  static let isPermitted: Bool = {
    guard getuid() == 0, let probe = try? temporaryDirectory("substatus-mount-probe") else {
      return false
    }
    defer { try? FileManager.default.removeItem(at: probe) }
    guard runMount("/bin/mount", ["-t", "tmpfs", "-o", "size=64k", "tmpfs", probe.path]) else {
      return false
    }
    runMount("/bin/umount", ["-l", probe.path])
    return true
  }()

  init(sizeKiB: Int) throws {
    directory = try temporaryDirectory("substatus-diskfull")
    guard
      runMount("/bin/mount", ["-t", "tmpfs", "-o", "size=\(sizeKiB)k", "tmpfs", directory.path])
    else {
      try? FileManager.default.removeItem(at: directory)
      throw FaultTestFailure("mount -t tmpfs failed")
    }
  }

  func unmount() {
    runMount("/bin/umount", ["-l", directory.path])
    try? FileManager.default.removeItem(at: directory)
  }
}

/// Writes `path` until the file system is full; returns the bytes written.
func fillUp(_ path: String) -> Int {
  let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
  guard fd >= 0 else { return 0 }
  defer { close(fd) }
  let chunk = [UInt8](repeating: 0x5A, count: 16 * 1024)
  var written = 0
  var size = chunk.count
  while size > 0 {
    let n = chunk.withUnsafeBytes { write(fd, $0.baseAddress, size) }
    if n > 0 { written += n } else { size /= 2 }  // then fill the last partial blocks
  }
  return written
}

/// The data directory on a 4 MiB tmpfs that is then filled: writes fail with UNAVAILABLE, reads go
/// on, and writes succeed again once space returns — without restarting substatusd.
@Suite(.serialized, .timeLimit(.minutes(1))) struct DiskFullTests {
  @Test(
    .enabled(
      if: SmallTmpfs.isPermitted, "needs root to mount a small tmpfs (mount -t tmpfs); skipped"))
  func writesFailWithUnavailableWhileTheDiskIsFullAndReadsGoOn() async throws {
    let disk = try SmallTmpfs(sizeKiB: 4096)
    defer { disk.unmount() }
    let work = try temporaryDirectory("substatus-diskfull-work")
    defer { try? FileManager.default.removeItem(at: work) }
    let daemon = try await startDaemon(
      dataDirectory: disk.directory.appendingPathComponent("data"), workDirectory: work)
    defer { daemon.abandon() }  // before the unmount
    let (adminKey, appID) = try await makeTenantAndApp(daemon, workDirectory: work)
    let api = try client(daemon, key: adminKey)
    let before = (0..<50).map { transaction("before-\($0)", original: "before-0", day: Int64($0)) }
    _ = try await api.importTransactions(appID: appID, userID: "alice", transactions: before)

    let filler = disk.directory.appendingPathComponent("filler").path
    #expect(fillUp(filler) > 0)
    // Big batches until one fails: SQLite may first use free pages of its files.
    var failure: RPCError?
    var n = 0
    for _ in 0..<30 where failure == nil {
      let batch = (0..<1000).map { i in
        transaction(
          "full-\(n + i)-" + String(repeating: "x", count: 50), original: "full-0",
          day: Int64(i % 300))
      }
      n += batch.count
      do {
        let response = try await api.importTransactions(
          appID: appID, userID: "bob", transactions: batch)
        let rejected = response.transactionResults.filter { $0.outcome != .created }
        #expect(
          rejected.count == 0,
          "\(rejected.count) not stored, e.g. \(rejected.first?.error?.message ?? "")")
      } catch {
        failure = error
      }
    }
    let error = try #require(
      failure,
      "no write failed on a full disk: \(try? runProcessOutput("/bin/df", ["-k", disk.directory.path]))"
    )
    #expect(error.code == .unavailable, "\(error)")
    print("disk full: \(error.code): \(error.message)")

    // Reads go on.
    #expect(
      try await storedTransactionIDs(api, appID: appID, userID: "alice")
        == Set(before.map(\.transactionID)))
    let status = try await api.status(appID: appID, userID: "alice")
    #expect(!status.groups.isEmpty)
    #expect(try await client(daemon, key: nil).health().status == .serving)

    // Space returns: writes succeed again, same process.
    try FileManager.default.removeItem(atPath: filler)
    let after = [transaction("after-1", original: "after-1", day: 1)]
    let recovered = await waitUntil(timeout: .seconds(5), every: .milliseconds(100)) {
      (try? await api.importTransactions(appID: appID, userID: "carol", transactions: after)) != nil
    }
    #expect(recovered, "writes did not recover once space returned")
    #expect(try await storedTransactionIDs(api, appID: appID, userID: "carol") == ["after-1"])
    #expect(await daemon.stop() == 0, "substatusd: \(daemon.log().suffix(2000))")
  }
}

func runProcessOutput(_ executable: String, _ arguments: [String]) throws -> String {
  let process = Process()
  process.executableURL = URL(fileURLWithPath: executable)
  process.arguments = arguments
  let pipe = Pipe()
  process.standardOutput = pipe
  try process.run()
  let data = pipe.fileHandleForReading.readDataToEndOfFile()
  process.waitUntilExit()
  return String(decoding: data, as: UTF8.self)
}
