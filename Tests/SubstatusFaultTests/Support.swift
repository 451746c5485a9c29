import Foundation
import SubstatusProcessTestKit
import RPCCore
import SubstatusClient
import SubstatusWire
import Synchronization
import Testing

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// The repository root, found from this file's path.
let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
  .deletingLastPathComponent()
  .deletingLastPathComponent()

/// A built executable of this package (`swift build --build-tests` builds them next to the tests).
func builtExecutable(_ name: String) throws -> String {
  let binDir = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
  let candidates = [binDir, binDir.deletingLastPathComponent()].map {
    $0.appendingPathComponent(name).path
  }
  return try #require(
    candidates.first(where: FileManager.default.isExecutableFile(atPath:)), "\(name) is not built")
}

struct FaultTestFailure: Error, CustomStringConvertible {
  var description: String
  init(_ description: String) { self.description = description }
}

/// A fresh directory under the system's temporary directory.
func temporaryDirectory(_ prefix: String) throws -> URL {
  let url = FileManager.default.temporaryDirectory.appendingPathComponent(
    "\(prefix)-\(UUID().uuidString)")
  try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
  return url
}

/// A child process that announced its addresses in a ready file (substatusd, appstore-sim), on
/// ``ChildProcess``: its exit is seen without blocking a thread, and it is killed if dropped.
final class ReadyProcess: Sendable {
  let child: ChildProcess
  let ready: [String: String]
  let logFile: URL

  /// Starts `executable` and waits (at most 30 s) until it has written `readyFile`.
  init(_ executable: String, _ arguments: [String], readyFile: URL, logFile: URL) async throws {
    try? FileManager.default.removeItem(at: readyFile)
    self.logFile = logFile
    child = try ChildProcess(try builtExecutable(executable), arguments)
    do { ready = try await child.readyFile(readyFile) } catch {
      child.send(SIGKILL)
      throw FaultTestFailure("\(executable) did not become ready: \(String(describing: error).suffix(2000))")
    }
  }

  var pid: Int32 { child.pid }

  func log() -> String { child.standardError }

  /// Sends `signal` and waits (at most 20 s, then SIGKILL) for the exit; returns the status (128 +
  /// the signal when one ended it).
  @discardableResult
  func stop(_ signal: Int32 = SIGTERM) async -> Int32 {
    let exit = await child.stop(signal: signal)
    return exit.signaled ? 128 + exit.status : exit.status
  }

  /// Sends `signal` without waiting (for a test's `defer`, which cannot wait).
  func abandon(_ signal: Int32 = SIGKILL) { child.send(signal) }
}

/// substatusd on free ports over `dataDirectory`.
func startDaemon(
  dataDirectory: URL, workDirectory: URL, round: Int = 0, extraArguments: [String] = []
) async throws
  -> ReadyProcess
{
  try FileManager.default.createDirectory(at: dataDirectory, withIntermediateDirectories: true)
  return try await ReadyProcess(
    "substatusd",
    [
      "--data-dir", dataDirectory.path, "--grpc-listen", "127.0.0.1:0", "--http-listen",
      "127.0.0.1:0",
      "--ready-file", workDirectory.appendingPathComponent("ready-\(round).json").path,
      "--operator-key-file", workDirectory.appendingPathComponent("operator.key").path,
      "--refresh-interval", "0",
    ] + extraArguments,
    readyFile: workDirectory.appendingPathComponent("ready-\(round).json"),
    logFile: workDirectory.appendingPathComponent("substatusd-\(round).log"))
}

/// A client of `daemon` with `key`; calls are not retried unless a test asks.
func client(_ daemon: ReadyProcess, key: String?) throws -> SubstatusClient {
  try SubstatusClient(
    address: daemon.ready["grpc"]!, apiKey: key, defaultTimeout: .seconds(15), retryPolicy: .none)
}

/// Creates a tenant and an app with the daemon tests' catalog; returns (admin key, app id).
func makeTenantAndApp(
  _ daemon: ReadyProcess, workDirectory: URL, bundleID: String = "com.example.app"
)
  async throws -> (String, String)
{
  let operatorKey = try String(
    contentsOf: workDirectory.appendingPathComponent("operator.key"), encoding: .utf8
  ).trimmingCharacters(in: .whitespacesAndNewlines)
  let tenant = try await client(daemon, key: operatorKey).createTenant(name: "faults")
  let admin = try client(daemon, key: tenant.adminKey)
  let app = try await admin.registerApp(bundleID: bundleID)
  let catalog = try String(
    contentsOf: packageRoot.appendingPathComponent(
      "Tests/SubstatusDaemonTests/Fixtures/catalog.json"), encoding: .utf8)
  var products = try Substatus_V1_PutProductsRequest(jsonString: catalog)
  products.appID = app.appID
  _ = try await admin.call(
    Substatus_V1_AdminService.putProducts, products, idempotency: .idempotent)
  return (tenant.adminKey, app.appID)
}

/// An auto-renewable transaction of `pro.monthly`.
func transaction(_ id: String, original: String, day: Int64) -> Substatus_V1_Transaction {
  var t = Substatus_V1_Transaction()
  t.transactionID = id
  t.originalTransactionID = original
  t.productID = "pro.monthly"
  t.purchaseDateMs = 1_704_067_200_000 + day * 86_400_000
  t.expiresDateMs = t.purchaseDateMs + 30 * 86_400_000
  return t
}

/// Every transaction id in the user's stored history (all pages).
func storedTransactionIDs(_ client: SubstatusClient, appID: String, userID: String) async throws
  -> Set<String>
{
  var ids = Set<String>()
  var token = ""
  repeat {
    let page = try await client.transactionHistory(
      appID: appID, userID: userID, pageSize: 1000, pageToken: token)
    ids.formUnion(page.transactions.map(\.transactionID))
    token = page.nextPageToken
  } while !token.isEmpty
  return ids
}

let httpSession: URLSession = {
  let configuration = URLSessionConfiguration.ephemeral
  configuration.timeoutIntervalForRequest = 20
  return URLSession(configuration: configuration)
}()

/// An HTTP call with a JSON body; returns the status and the body's JSON object (if any).
@discardableResult
func http(_ method: String, _ url: String, _ body: String? = nil) async throws -> (
  Int, [String: Any]
) {
  var request = URLRequest(url: URL(string: url)!)
  request.httpMethod = method
  if let body { request.httpBody = Data(body.utf8) }
  let (data, response) = try await httpSession.data(for: request)
  let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] ?? [:]
  return ((response as! HTTPURLResponse).statusCode, object)
}

/// Runs `body`, expecting `RPCError` with `code`; returns the error.
func expectRPCError<T>(_ code: RPCError.Code, _ what: String, _ body: () async throws -> T) async
  -> RPCError?
{
  do {
    _ = try await body()
    Issue.record("\(what): expected \(code), got OK")
  } catch let error as RPCError {
    #expect(error.code == code, "\(what): \(error)")
    return error
  } catch {
    Issue.record("\(what): expected RPCError \(code), got \(error)")
  }
  return nil
}
