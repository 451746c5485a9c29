import Foundation
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// A throwaway PostgreSQL server for user-level tests that run `substatusd --store postgres://…`:
/// a cluster made by `initdb` in a temporary directory, on a free loopback port, its unix socket
/// in that directory, run as `nobody` when the tests run as root (PostgreSQL refuses root), with
/// `fsync=off` (its data need not survive a power loss). One server per test process
/// (``shared()``), started on first use; each test takes a fresh database (``createDatabase()``).
/// Stopped (`pg_ctl stop -m fast`) and deleted when the test process exits, and by a watchdog
/// process if the test process dies. Every program runs through ``runExecutable(_:_:stdin:environment:currentDirectory:timeout:)``:
/// no thread of Swift's cooperative pool waits on one.
public final class PostgresTestServer: Sendable {
  /// The Debian PostgreSQL binaries (`scripts/install-deps --test` installs them).
  public static let binDirectory = "/usr/lib/postgresql/15/bin"

  /// The cluster's directory (data, socket, log).
  public let directory: String
  /// The loopback port it listens on.
  public let port: Int
  private let databases = Atomic<Int>(0)

  private static let starting = Mutex<Task<PostgresTestServer, any Error>?>(nil)

  /// The test process's server, started by the first caller (the others wait for it).
  public static func shared() async throws -> PostgresTestServer {
    let task = starting.withLock { task in
      if let task { return task }
      let started = Task { try await PostgresTestServer() }
      task = started
      return started
    }
    return try await task.value
  }

  private init() async throws {
    let fileManager = FileManager.default
    guard fileManager.isExecutableFile(atPath: Self.binDirectory + "/initdb") else {
      throw ServerProcessError(message: "\(Self.binDirectory)/initdb is missing: run scripts/install-deps --test")
    }
    directory = fileManager.temporaryDirectory.appendingPathComponent("substatus-pg-\(UUID().uuidString.prefix(8))").path
    try fileManager.createDirectory(atPath: directory, withIntermediateDirectories: true)
    if getuid() == 0 { _ = chown(directory, 65534, 65534) }
    registerCleanup(directory: directory)
    let initdb = try await Self.asPostgresUser(
      "initdb",
      [
        "-D", directory + "/data", "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync",
        "--no-instructions",
      ])
    guard initdb.status == 0 else { throw ServerProcessError(message: "initdb failed: \(initdb.stdout)\(initdb.stderr)") }
    let settings = [
      "-c listen_addresses=127.0.0.1", "-k \(directory)", "-c max_connections=300", "-c shared_buffers=32MB",
      "-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off",
    ]
    // The port was free a moment ago; another process may take it first: retry with another.
    var lastError = ""
    for _ in 0..<5 {
      let port = try freeLoopbackPort()
      let started = try await Self.asPostgresUser(
        "pg_ctl",
        [
          "-D", directory + "/data", "-l", directory + "/server.log", "-w", "-t", "60", "-o",
          (["-p \(port)"] + settings).joined(separator: " "), "start",
        ])
      if started.status == 0 {
        self.port = port
        return
      }
      lastError = started.stdout + started.stderr
        + ((try? String(contentsOfFile: directory + "/server.log", encoding: .utf8)) ?? "")
    }
    throw ServerProcessError(message: "cannot start PostgreSQL: \(lastError)")
  }

  /// Runs one of PostgreSQL's programs to its end, as `nobody` when the tests run as root; its
  /// output in `stdout` (and `stderr` empty).
  ///
  /// posix_spawn and waitpid on a thread of its own rather than ``ChildProcess``: Foundation's
  /// `Process` sees an exit only once every copy of the child's descriptors is closed, and the
  /// server `pg_ctl start` leaves running keeps them.
  private static func asPostgresUser(_ tool: String, _ arguments: [String]) async throws -> ProcessRun {
    let argv =
      (getuid() == 0 ? ["/usr/sbin/runuser", "-u", "nobody", "--"] : []) + [binDirectory + "/" + tool] + arguments
    let output = FileManager.default.temporaryDirectory.appendingPathComponent("substatus-pg-tool-\(UUID().uuidString)").path
    defer { unlink(output) }
    let environment = ProcessInfo.processInfo.environment.map { "\($0)=\($1)" }
    let status: Int32 = try await withCheckedThrowingContinuation { continuation in
      Thread {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        var cArgv = cStrings(argv)
        var cEnvironment = cStrings(environment)
        defer { for p in cArgv + cEnvironment { free(p) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, argv[0], &actions, nil, &cArgv, &cEnvironment)
        guard rc == 0 else {
          continuation.resume(throwing: ServerProcessError(message: "cannot start \(argv[0]): error \(rc)"))
          return
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let signal = status & 0x7f
        continuation.resume(returning: signal == 0 ? (status >> 8) & 0xff : 128 + signal)
      }.start()
    }
    let printed = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
    return ProcessRun(status: status, stdout: printed, stderr: "")
  }

  /// The `postgres://` URL of `database` on this server.
  public func url(_ database: String) -> String { "postgres://postgres@127.0.0.1:\(port)/\(database)" }

  /// Creates an empty database and returns its URL.
  public func createDatabase() async throws -> String {
    let name = "substatus_\(getpid())_\(databases.add(1, ordering: .relaxed).newValue)"
    _ = try await query(url("postgres"), "CREATE DATABASE \(name)")
    return url(name)
  }

  /// Runs `sql` with `psql` on the database at `url`; the rows, one a line, columns joined by `|`
  /// (what `sqlite3` prints by default).
  /// - Throws: when `psql` fails, with its message.
  public func query(_ url: String, _ sql: String) async throws -> [String] {
    let run = try await runExecutable(
      Self.binDirectory + "/psql", [url, "-X", "-q", "-A", "-t", "-F", "|", "-v", "ON_ERROR_STOP=1", "-c", sql],
      environment: ["PGCONNECT_TIMEOUT": "10"].merging(
        ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("PG") }) { first, _ in first })
    guard run.status == 0 else { throw ServerProcessError(message: "psql \(sql): \(run.stderr)") }
    return run.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
      .reversed().drop { $0.isEmpty }.reversed()
  }
}

/// A loopback port that was free a moment ago (PostgreSQL cannot bind port 0).
private func freeLoopbackPort() throws -> Int {
  let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
  guard fd >= 0 else { throw ServerProcessError(message: "socket() failed") }
  defer { close(fd) }
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
  guard bound == 0, named == 0 else { throw ServerProcessError(message: "bind() or getsockname() failed") }
  return Int(UInt16(bigEndian: address.sin_port))
}

/// `strings` as a C `argv`: copies (freed by the caller), then a null.
private func cStrings(_ strings: [String]) -> [UnsafeMutablePointer<CChar>?] {
  strings.map { strdup($0) } + [nil]
}

/// The cleanup shell's whole environment.
private let cleanupPath = "PATH=/usr/sbin:/usr/bin:/sbin:/bin"

/// The clusters to stop and delete at exit.
private let clusters = Mutex<[String]>([])

/// Stops the cluster in `directory` and deletes it when the test process exits normally (`atexit`)
/// or dies (a watchdog process, in its own session, that outlives it).
private func registerCleanup(directory: String) {
  let asNobody = getuid() == 0 ? "/usr/sbin/runuser -u nobody -- " : ""
  let stop = "\(asNobody)\(PostgresTestServer.binDirectory)/pg_ctl -D '\(directory)/data' -m fast -w stop >/dev/null 2>&1"
  let first = clusters.withLock { list -> Bool in
    list.append(stop + "; rm -rf '\(directory)'")
    return list.count == 1
  }
  if first {
    atexit {
      for command in clusters.withLock({ $0 }) {
        var pid: pid_t = 0
        var argv = cStrings(["/bin/sh", "-c", command])
        defer { for p in argv { free(p) } }
        var env: [UnsafeMutablePointer<CChar>?] = [strdup(cleanupPath), nil]
        defer { free(env[0]) }
        if posix_spawn(&pid, "/bin/sh", nil, nil, &argv, &env) == 0 {
          var status: Int32 = 0
          while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        }
      }
    }
  }
  let watchdog =
    "while kill -0 \(getpid()) 2>/dev/null; do sleep 1; done; \(stop); rm -rf '\(directory)'"
  var actions = posix_spawn_file_actions_t()
  posix_spawn_file_actions_init(&actions)
  defer { posix_spawn_file_actions_destroy(&actions) }
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
  posix_spawn_file_actions_adddup2(&actions, 1, 2)
  var pid: pid_t = 0
  var argv = cStrings(["/usr/bin/setsid", "/bin/sh", "-c", watchdog])
  defer { for p in argv { free(p) } }
  var env: [UnsafeMutablePointer<CChar>?] = [strdup(cleanupPath), nil]
  defer { free(env[0]) }
  _ = posix_spawn(&pid, "/usr/bin/setsid", &actions, nil, &argv, &env)
}
