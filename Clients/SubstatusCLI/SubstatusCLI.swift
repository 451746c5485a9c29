public import Foundation
public import RPCCore
import SubstatusClient
public import SubstatusClock
import SubstatusWire
import Synchronization

/// What the CLI reads and writes, so that tests run it in process.
public struct CLIEnvironment: Sendable {
  /// Environment variables (`SUBSTATUS_ADDR`, `SUBSTATUS_API_KEY`).
  public var variables: [String: String]
  /// Writes to standard output.
  public var standardOutput: @Sendable (String) -> Void
  /// Writes to standard error.
  public var standardError: @Sendable (String) -> Void
  /// Reads all of standard input.
  public var readStandardInput: @Sendable () throws -> [UInt8]
  /// Reads a whole file.
  public var readFile: @Sendable (String) throws -> [UInt8]
  /// Opens a client transport to a `HOST:PORT` address; throws `RPCError` when it cannot.
  public var connect: @Sendable (String) throws -> any ClientTransport
  /// Opens a TLS client transport (for `--tls`, `--ca-file`, `--client-cert`); `nil` when the
  /// environment has no TLS.
  public var connectTLS: (@Sendable (String, CLITLSOptions) throws -> any ClientTransport)?
  /// The clock of the client's deadlines and retry backoffs.
  public var clock: any ServiceClock

  /// Creates an environment.
  ///
  /// - Parameters:
  ///   - variables: Environment variables.
  ///   - standardOutput: Receives standard output.
  ///   - standardError: Receives standard error.
  ///   - readStandardInput: Reads standard input.
  ///   - readFile: Reads a file by path.
  ///   - connect: Opens a transport to an address.
  ///   - connectTLS: Opens a TLS transport to an address.
  ///   - clock: The clock of deadlines and retry backoffs (a `ManualClock` in tests).
  public init(
    variables: [String: String], standardOutput: @escaping @Sendable (String) -> Void,
    standardError: @escaping @Sendable (String) -> Void,
    readStandardInput: @escaping @Sendable () throws -> [UInt8],
    readFile: @escaping @Sendable (String) throws -> [UInt8] = { path in
      [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
    },
    connect: @escaping @Sendable (String) throws -> any ClientTransport,
    connectTLS: (@Sendable (String, CLITLSOptions) throws -> any ClientTransport)? = nil,
    clock: any ServiceClock = SystemClock()
  ) {
    self.connectTLS = connectTLS
    self.clock = clock
    self.variables = variables
    self.standardOutput = standardOutput
    self.standardError = standardError
    self.readStandardInput = readStandardInput
    self.readFile = readFile
    self.connect = connect
  }
}

/// The TLS flags of the command line: the server is verified against ``caFile`` (or the system
/// store), and ``clientCertificate`` with ``clientKey`` is presented for mutual TLS.
public struct CLITLSOptions: Sendable, Equatable {
  /// `--ca-file`: CA certificates (PEM) to verify the server with; `nil` for the system store.
  public var caFile: String?
  /// `--client-cert`: a client certificate chain (PEM).
  public var clientCertificate: String?
  /// `--client-key`: the client certificate's private key (PEM).
  public var clientKey: String?

  /// Creates TLS options.
  /// - Parameters:
  ///   - caFile: CA certificates; `nil` for the system store.
  ///   - clientCertificate: A client certificate chain for mutual TLS.
  ///   - clientKey: Its private key.
  public init(caFile: String? = nil, clientCertificate: String? = nil, clientKey: String? = nil) {
    self.caFile = caFile
    self.clientCertificate = clientCertificate
    self.clientKey = clientKey
  }
}

/// The `substatus` command-line client: parses a command line, calls the server, prints tables or
/// proto3 JSON. The executable is a thin `main` around ``run(_:environment:)``.
///
/// ```swift
/// let status = await SubstatusCLI.run(
///   ["status", "app_1", "user-42", "--json"], environment: environment)
/// ```
public enum SubstatusCLI {
  /// The address used without `--addr` and `SUBSTATUS_ADDR`.
  public static let defaultAddress = "127.0.0.1:50051"
  /// The deadline of a call without `--timeout`, in seconds.
  public static let defaultTimeoutSeconds = 30

  /// Exit status: success.
  public static let exitSuccess: Int32 = 0
  /// Exit status: the call failed (the server's or the transport's gRPC status).
  public static let exitFailure: Int32 = 1
  /// Exit status: the command line or a local input file is wrong.
  public static let exitUsage: Int32 = 2

  /// Runs one command line.
  ///
  /// - Parameters:
  ///   - arguments: The arguments after the program name.
  ///   - environment: Streams, files, variables and the transport factory.
  /// - Returns: The exit status: 0 success, 1 RPC failure, 2 usage error.
  public static func run(_ arguments: [String], environment: CLIEnvironment) async -> Int32 {
    // The last guard of "no raw control byte on the terminal": whatever a command prints, only
    // its own line breaks pass as such (TerminalText).
    var environment = environment
    let standardOutput = environment.standardOutput
    let standardError = environment.standardError
    environment.standardOutput = { standardOutput(TerminalText.visibleKeepingLines($0)) }
    environment.standardError = { standardError(TerminalText.visibleKeepingLines($0)) }
    let parsed: ParsedArguments
    do {
      parsed = try parseArguments(arguments, commands: commandTable)
    } catch {
      reportUsage(error, environment)
      return exitUsage
    }
    if parsed.help || parsed.command == nil {
      if let command = parsed.command {
        environment.standardOutput(help(for: command))
      } else if parsed.help {
        environment.standardOutput(help(commands: commandTable, group: parsed.group))
      } else {
        environment.standardError(help(commands: commandTable))
        return exitUsage
      }
      return exitSuccess
    }
    guard let command = parsed.command else { return exitUsage }
    do {
      let context = try CommandContext(parsed: parsed, command: command, environment: environment)
      let output = try await execute(command, context)
      environment.standardOutput(output)
      return exitSuccess
    } catch let error as UsageError {
      reportUsage(error, environment)
      return exitUsage
    } catch let error as RPCError {
      environment.standardError("substatus: \(oneLine(error.description))\n")
      return exitFailure
    } catch let error as CommandFailure {
      environment.standardError("substatus: \(oneLine(error.message))\n")
      return exitFailure
    } catch {
      environment.standardError("substatus: \(oneLine(String(describing: error)))\n")
      return exitFailure
    }
  }

  private static func reportUsage(_ error: UsageError, _ environment: CLIEnvironment) {
    let prefix = error.command.map { "substatus \($0): " } ?? "substatus: "
    let pointer = error.command.map { "substatus \($0) --help" } ?? "substatus --help"
    environment.standardError("\(prefix)\(error.message)\nRun '\(pointer)' for usage.\n")
  }

  /// A message on one line, its control characters shown (the server's messages quote values).
  private static func oneLine(_ text: String) -> String {
    TerminalText.visible(text.split(whereSeparator: \.isNewline).joined(separator: " "))
  }
}

/// Connects on the first call, so that a command checks all its input before it connects.
final class LazyTransport: ClientTransport {
  private let address: String
  private let connect: @Sendable (String) throws -> any ClientTransport
  private let transport = Mutex<(any ClientTransport)?>(nil)

  init(address: String, connect: @escaping @Sendable (String) throws -> any ClientTransport) {
    self.address = address
    self.connect = connect
  }

  func unary(method: String, request: [UInt8], metadata: Metadata, options: CallOptions)
    async throws(RPCError) -> ClientResponse
  {
    try await connected().unary(method: method, request: request, metadata: metadata, options: options)
  }

  func serverStreaming(method: String, request: [UInt8], metadata: Metadata, options: CallOptions)
    async throws(RPCError) -> ClientResponseStream
  {
    try await connected().serverStreaming(
      method: method, request: request, metadata: metadata, options: options)
  }

  /// The transport, connected on first use.
  private func connected() throws(RPCError) -> any ClientTransport {
    do {
      return try transport.withLock { slot in
        if let existing = slot { return existing }
        let created = try connect(address)
        slot = created
        return created
      }
    } catch let error as RPCError {
      throw error
    } catch {
      throw RPCError(
        code: .unavailable, message: "cannot connect to \(address): \(error)", cause: error)
    }
  }
}

/// A failure that is not the command line's fault and not an RPC status (exit status 1).
struct CommandFailure: Error {
  let message: String
}

/// The resolved global flags and the client.
struct CommandContext: Sendable {
  let parsed: ParsedArguments
  let command: CommandSpec
  let environment: CLIEnvironment
  let json: Bool
  let client: SubstatusClient

  /// The transport factory the flags ask for: TLS with `--tls`, `--ca-file` or a client certificate.
  static func connector(_ parsed: ParsedArguments, _ environment: CLIEnvironment, command: String)
    throws(UsageError) -> @Sendable (String) throws -> any ClientTransport
  {
    let options = CLITLSOptions(
      caFile: parsed.value("--ca-file"), clientCertificate: parsed.value("--client-cert"),
      clientKey: parsed.value("--client-key"))
    guard (options.clientCertificate == nil) == (options.clientKey == nil) else {
      throw UsageError(message: "--client-cert and --client-key go together", command: command)
    }
    guard parsed.has("--tls") || options != CLITLSOptions() else { return environment.connect }
    guard let connectTLS = environment.connectTLS else {
      throw UsageError(message: "TLS is not available in this build", command: command)
    }
    return { address in try connectTLS(address, options) }
  }

  init(parsed: ParsedArguments, command: CommandSpec, environment: CLIEnvironment) throws {
    self.parsed = parsed
    self.command = command
    self.environment = environment
    json = parsed.has("--json")
    let address =
      parsed.value("--addr") ?? environment.variables["SUBSTATUS_ADDR"]
      ?? SubstatusCLI.defaultAddress
    try Self.checkAddress(address, command: command.name)
    var timeout = Duration.seconds(SubstatusCLI.defaultTimeoutSeconds)
    if let text = parsed.value("--timeout") {
      guard let seconds = Double(text), seconds.isFinite, seconds > 0, seconds <= 86_400 else {
        throw UsageError(
          message: "--timeout needs a positive number of seconds, not '\(text)'",
          command: command.name)
      }
      timeout = .nanoseconds(Int64(seconds * 1e9))
    }
    var key: String?
    if command.needsKey {
      key = parsed.value("--key") ?? environment.variables["SUBSTATUS_API_KEY"]
      guard let found = key, !found.isEmpty else {
        throw UsageError(
          message: "no API key: pass --key KEY or set SUBSTATUS_API_KEY", command: command.name)
      }
    }
    let transport = LazyTransport(
      address: address, connect: try Self.connector(parsed, environment, command: command.name))
    client = SubstatusClient(transport: transport, apiKey: key, defaultTimeout: timeout, clock: environment.clock)
  }

  private static func checkAddress(_ address: String, command: String) throws(UsageError) {
    guard let colon = address.lastIndex(of: ":"), colon != address.startIndex,
      let port = Int(address[address.index(after: colon)...]), (1...65_535).contains(port)
    else {
      throw UsageError(message: "--addr must be HOST:PORT, not '\(address)'", command: command)
    }
  }

  /// The positional argument number `index`.
  func argument(_ index: Int) -> String { parsed.positionals[index] }

  /// A flag's value as an `Int64` in a range.
  func integer(_ flag: String, atLeast minimum: Int64 = 0) throws(UsageError) -> Int64? {
    guard let text = parsed.value(flag) else { return nil }
    guard let value = Int64(text), value >= minimum else {
      throw UsageError(
        message: "\(flag) needs an integer of at least \(minimum), not '\(text)'",
        command: command.name)
    }
    return value
  }

  /// A flag's value as a boolean (`true`/`false`).
  func boolean(_ flag: String) throws(UsageError) -> Bool? {
    guard let text = parsed.value(flag) else { return nil }
    switch text.lowercased() {
    case "true": return true
    case "false": return false
    default:
      throw UsageError(message: "\(flag) needs true or false, not '\(text)'", command: command.name)
    }
  }

  /// A flag's value, one of `choices` (case-insensitive).
  func choice(_ flag: String, _ choices: [String]) throws(UsageError) -> String? {
    guard let text = parsed.value(flag) else { return nil }
    guard let match = choices.first(where: { $0 == text.lowercased() }) else {
      throw UsageError(
        message: "\(flag) must be one of \(choices.joined(separator: ", ")), not '\(text)'",
        command: command.name)
    }
    return match
  }

  /// `--as-of MS` as a date.
  func asOf() throws(UsageError) -> Date? {
    try integer("--as-of", atLeast: 0).map { Date(substatusMilliseconds: $0) }
  }

  /// `--environment production|sandbox`.
  func environmentFlag() throws(UsageError) -> Substatus_V1_Environment {
    switch try choice("--environment", ["production", "sandbox"]) {
    case "production": .production
    case "sandbox": .sandbox
    default: .unspecified
    }
  }

  /// The bytes of a file, or of standard input for `-`.
  func read(_ path: String, what: String) throws(UsageError) -> [UInt8] {
    do {
      return path == "-" ? try environment.readStandardInput() : try environment.readFile(path)
    } catch {
      let source = path == "-" ? "standard input" : "'\(path)'"
      throw UsageError(
        message: "cannot read \(what) from \(source): \(error.localizedDescription)",
        command: command.name)
    }
  }
}
