import Foundation
import Glibc
import Synchronization
import SubscriptionStorage
import Testing

@testable import SubscriptionStoragePostgres

/// The Debian PostgreSQL binaries.
let postgresBin = "/usr/lib/postgresql/15/bin"

/// Starts `argv` with stdin from /dev/null and stdout+stderr into `output` (or /dev/null).
///
/// posix_spawn and waitpid rather than Foundation's `Process`: its exit detection needs a free
/// Dispatch worker, and on Linux those are the cooperative threads the tests block in, so on 2 cores
/// `waitUntilExit` can starve.
func spawn(_ argv: [String], output: String? = nil, environment: [String: String]? = nil) throws
  -> pid_t
{
  var actions = posix_spawn_file_actions_t()
  posix_spawn_file_actions_init(&actions)
  defer { posix_spawn_file_actions_destroy(&actions) }
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
  posix_spawn_file_actions_addopen(
    &actions, 1, output ?? "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0o644)
  posix_spawn_file_actions_adddup2(&actions, 1, 2)
  let env = (environment ?? ProcessInfo.processInfo.environment).map { "\($0)=\($1)" }
  var cArgs = argv.map { strdup($0) } + [nil]
  var cEnv = env.map { strdup($0) } + [nil]
  defer {
    for p in cArgs { free(p) }
    for p in cEnv { free(p) }
  }
  var pid: pid_t = 0
  let rc = posix_spawn(&pid, argv[0], &actions, nil, &cArgs, &cEnv)
  guard rc == 0 else { throw PostgresFailure("cannot start \(argv[0]): error \(rc)") }
  return pid
}

/// Waits for a child and returns its exit status (128 + signal when killed).
@discardableResult
func waitForExit(_ pid: pid_t) -> Int32 {
  var status: Int32 = 0
  while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
  let signal = status & 0x7f
  return signal == 0 ? (status >> 8) & 0xff : 128 + signal
}

/// Runs a program (as `nobody` when the tests run as root: PostgreSQL refuses to run as root) and
/// returns its exit status and combined output.
@discardableResult
func runTool(_ tool: String, _ arguments: [String]) throws -> (Int32, String) {
  let argv = (getuid() == 0 ? ["/usr/sbin/runuser", "-u", "nobody", "--"] : []) + [tool] + arguments
  let output = FileManager.default.temporaryDirectory
    .appendingPathComponent("substatus-tool-\(UUID().uuidString)").path
  defer { unlink(output) }
  let status = waitForExit(try spawn(argv, output: output))
  return (status, (try? String(contentsOfFile: output, encoding: .utf8)) ?? "")
}

struct PostgresFailure: Error, CustomStringConvertible {
  var description: String
  init(_ description: String) { self.description = description }
}

/// A port that was free a moment ago: bind port 0, read it, close (PostgreSQL cannot bind port 0).
func freePort() throws -> Int {
  let (fd, port) = try boundLoopbackSocket()
  close(fd)
  return port
}

/// A socket bound to a free loopback port (the caller closes it).
private func boundLoopbackSocket() throws -> (Int32, Int) {
  let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
  guard fd >= 0 else { throw PostgresFailure("socket() failed") }
  var address = sockaddr_in()
  address.sin_family = sa_family_t(AF_INET)
  address.sin_addr.s_addr = inet_addr("127.0.0.1")
  address.sin_port = 0
  var length = socklen_t(MemoryLayout<sockaddr_in>.size)
  let bound = withUnsafePointer(to: &address) {
    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
  }
  let named = withUnsafeMutablePointer(to: &address) {
    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
  }
  guard bound == 0, named == 0 else {
    close(fd)
    throw PostgresFailure("bind() or getsockname() failed")
  }
  return (fd, Int(UInt16(bigEndian: address.sin_port)))
}

/// A loopback port that takes connections (the kernel completes them) and never answers: a
/// server that hangs. Closed when this value goes.
final class SilentListener: Sendable {
  let port: Int
  private let fd: Int32

  init() throws {
    (fd, port) = try boundLoopbackSocket()
    guard listen(fd, 16) == 0 else {
      close(fd)
      throw PostgresFailure("listen() failed")
    }
  }

  deinit { close(fd) }
}

/// A throwaway PostgreSQL cluster in a temporary directory, on a free port, its unix socket in that
/// directory, owned by `nobody` when run as root. Stopped (`pg_ctl stop -m fast`) and deleted when
/// the test process exits, and by a watchdog if the test process dies.
final class PostgresServer: Sendable {
  let directory: String
  let port: Int
  private let databases = Atomic<Int>(0)

  /// The cluster `initdb` made once per test run; servers start from copies of it.
  private static let template: Result<String, PostgresFailure> = {
    guard FileManager.default.isExecutableFile(atPath: postgresBin + "/initdb") else {
      return .failure(
        PostgresFailure("\(postgresBin)/initdb is missing: run scripts/install-deps --test"))
    }
    do {
      let dir = try makeDirectory("substatus-pg-template")
      let (status, out) = try runTool(
        postgresBin + "/initdb",
        [
          "-D", dir + "/data", "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C",
          "--no-sync", "--no-instructions",
        ])
      guard status == 0 else { return .failure(PostgresFailure("initdb failed: \(out)")) }
      registerCleanup(directory: dir, dataDirectory: nil)
      return .success(dir + "/data")
    } catch {
      return .failure(PostgresFailure("initdb: \(error)"))
    }
  }()

  /// The server for the contract suite: `fsync=off` (its data need not survive a power loss).
  static let fast = Result { () throws(PostgresFailure) in try PostgresServer(fsync: false) }
  /// The server for the daemon and durability tests: PostgreSQL's durable defaults.
  static let durable = Result { () throws(PostgresFailure) in try PostgresServer(fsync: true) }

  private static func makeDirectory(_ prefix: String) throws -> String {
    let dir = FileManager.default.temporaryDirectory
      .appendingPathComponent("\(prefix)-\(UUID().uuidString.prefix(8))").path
    try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    if getuid() == 0 { _ = chown(dir, 65534, 65534) }
    return dir
  }

  private init(fsync: Bool) throws(PostgresFailure) {
    let template = try Self.template.get()
    do {
      directory = try Self.makeDirectory("substatus-pg")
      let (copied, out) = try runTool("/bin/cp", ["-a", template, directory + "/data"])
      guard copied == 0 else { throw PostgresFailure("cannot copy the template cluster: \(out)") }
      registerCleanup(directory: directory, dataDirectory: directory + "/data")
      var settings = [
        "-c listen_addresses=127.0.0.1", "-k \(directory)", "-c max_connections=200",
        "-c shared_buffers=32MB",
      ]
      if !fsync {
        settings += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
      }
      // The port was free a moment ago; another process may take it first: retry with another.
      var lastError = ""
      for _ in 0..<5 {
        let port = try freePort()
        let (status, out) = try runTool(
          postgresBin + "/pg_ctl",
          [
            "-D", directory + "/data", "-l", directory + "/server.log", "-w", "-t", "60",
            "-o", (["-p \(port)"] + settings).joined(separator: " "), "start",
          ])
        if status == 0 {
          self.port = port
          return
        }
        lastError = out + ((try? String(contentsOfFile: directory + "/server.log", encoding: .utf8)) ?? "")
      }
      throw PostgresFailure("cannot start PostgreSQL: \(lastError)")
    } catch let error as PostgresFailure {
      throw error
    } catch {
      throw PostgresFailure("\(error)")
    }
  }

  /// A `postgres://` URL of a database on this server.
  func url(_ database: String) -> String { "postgres://postgres@127.0.0.1:\(port)/\(database)" }

  /// Runs SQL as the superuser on the `postgres` database.
  func admin(_ sql: String) throws {
    let db = try PGConnection(conninfo: url("postgres"))
    try db.execute(sql)
  }

  /// Creates an empty database and returns its URL.
  func createDatabase() throws -> String {
    let name = "substatus_\(getpid())_\(databases.add(1, ordering: .relaxed).newValue)"
    try admin("CREATE DATABASE \(name)")
    return url(name)
  }
}

/// Directories to stop and delete at exit.
private let cleanups = Mutex<[(directory: String, dataDirectory: String?)]>([])

/// Stops the server in `dataDirectory` (if any) and deletes `directory` when the test process exits
/// normally (`atexit`) or dies (a watchdog process that outlives it).
private func registerCleanup(directory: String, dataDirectory: String?) {
  let first = cleanups.withLock { list -> Bool in
    list.append((directory, dataDirectory))
    return list.count == 1
  }
  if first {
    atexit {
      for entry in cleanups.withLock({ $0 }) {
        if let data = entry.dataDirectory {
          _ = try? runTool(postgresBin + "/pg_ctl", ["-D", data, "-m", "fast", "-w", "stop"])
        }
        try? FileManager.default.removeItem(atPath: entry.directory)
      }
    }
  }
  let stop =
    dataDirectory.map { data in
      (getuid() == 0 ? "/usr/sbin/runuser -u nobody -- " : "")
        + "\(postgresBin)/pg_ctl -D '\(data)' -m fast -w stop;"
    } ?? ""
  _ = try? spawn([
    "/usr/bin/setsid", "/bin/sh", "-c",
    "while kill -0 \(getpid()) 2>/dev/null; do sleep 1; done; \(stop) rm -rf '\(directory)'",
  ])
}

/// A fixed master keyring for tests.
let testKeyring = MasterKeyring(current: try! MasterKey(bytes: [UInt8](repeating: 0x42, count: 32)))

/// Runs blocking work (starting servers, connecting, waiting for children) on its own thread, so the
/// few cooperative threads stay free for the tests running in parallel.
func blocking<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
  try await withCheckedThrowingContinuation { continuation in
    Thread { continuation.resume(with: Result { try body() }) }.start()
  }
}

/// Runs `body` with a fresh store on a fresh database of the fast server.
/// - Parameter historyCacheBytes: the store's history cache (0: off).
func withPostgresStore<T>(
  poolSize: Int = 2, historyCacheBytes: Int = 0, _ body: (PostgresStore) async throws -> T
) async throws -> T {
  let store = try await blocking {
    let url = try PostgresServer.fast.get().createDatabase()
    return try PostgresStore(
      configuration: .init(
        url: url, keyring: testKeyring, poolSize: poolSize, historyCacheBytes: historyCacheBytes))
  }
  defer { store.close() }
  return try await body(store)
}
