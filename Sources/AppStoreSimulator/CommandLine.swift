import Foundation
import HTTPServer
import ProcessSignals

#if canImport(Glibc)
  import Glibc
#endif

/// The `appstore-sim` command line.
///
/// ```
/// appstore-sim --listen HOST:PORT [--ready-file F] [--notify-url-default URL] [--time-scale N]
///              [--start-ms MS] [--id-base N] [--notification-retry-compression F]
///              [--notification-timeout SECONDS] [--state-file F] [--ca-dir DIR]
///              [--root-ca-out F]
/// ```
public struct SimulatorCommandLine: Sendable, Equatable {
  /// `--listen HOST:PORT` (default `127.0.0.1:0`).
  public var listen = "127.0.0.1:0"
  /// `--ready-file F`: once listening, `{"http":"HOST:PORT"}` is written there.
  public var readyFile: String?
  /// `--notify-url-default URL`: notification URL for apps registered without one.
  public var notifyURLDefault: String?
  /// `--time-scale N`: simulated ms per real ms (0 frozen, 1 real time; default 1).
  public var timeScale: Double = 1
  /// `--start-ms MS`: the simulated clock's start (default: now).
  public var startMs: Int64?
  /// `--id-base N`: transaction ids count up from N.
  public var idBase: Int64 = 2_000_000_000_000_000
  /// `--notification-retry-compression F`: Apple's retry delays divided by F (default 1).
  public var notificationRetryCompression: Double = 1
  /// `--notification-timeout SECONDS` (default 30, as Apple).
  public var notificationTimeoutSeconds: Double = 30
  /// `--state-file F`: the state is loaded from F at start (if it exists) and saved there on
  /// graceful stop.
  public var stateFile: String?
  /// `--ca-dir DIR`: the test root CA is loaded from `DIR/root-ca.pem` and
  /// `DIR/root-ca-key.pem`, or made and saved there; without it a fresh CA is made per run.
  public var caDirectory: String?
  /// `--root-ca-out F`: the root certificate (PEM) is written there at start, for the
  /// verifier that must trust it.
  public var rootCAOut: String?

  /// The usage text.
  public static let usage = """
    usage: appstore-sim --listen HOST:PORT [--ready-file F] [--notify-url-default URL]
                        [--time-scale N] [--start-ms MS] [--id-base N]
                        [--notification-retry-compression F] [--notification-timeout SECONDS]
                        [--state-file F] [--ca-dir DIR] [--root-ca-out F]
    """

  /// Defaults.
  public init() {}

  /// Parses the arguments (without the program name).
  /// - Throws: ``HTTPServerError`` with a one-line message for a bad or unknown option.
  public init(arguments: [String]) throws(HTTPServerError) {
    var iterator = arguments.makeIterator()
    func value(_ name: String) throws(HTTPServerError) -> String {
      guard let value = iterator.next() else {
        throw HTTPServerError(message: "\(name) needs a value")
      }
      return value
    }
    func number<T: LosslessStringConvertible>(_ name: String, _: T.Type) throws(HTTPServerError)
      -> T
    {
      let text = try value(name)
      guard let parsed = T(text) else {
        throw HTTPServerError(message: "\(name): '\(text)' is not a number")
      }
      return parsed
    }
    while let argument = iterator.next() {
      switch argument {
      case "--listen":
        listen = try value(argument)
        _ = try HTTPServerConfiguration(listen: listen)
      case "--ready-file": readyFile = try value(argument)
      case "--state-file": stateFile = try value(argument)
      case "--ca-dir": caDirectory = try value(argument)
      case "--root-ca-out": rootCAOut = try value(argument)
      case "--notify-url-default":
        let url = try value(argument)
        guard let parsed = URL(string: url), parsed.scheme == "http" || parsed.scheme == "https"
        else {
          throw HTTPServerError(message: "--notify-url-default: '\(url)' is not an http(s) URL")
        }
        notifyURLDefault = url
      case "--time-scale":
        timeScale = try number(argument, Double.self)
        guard timeScale >= 0, timeScale.isFinite else {
          throw HTTPServerError(message: "--time-scale must be >= 0")
        }
      case "--start-ms": startMs = try number(argument, Int64.self)
      case "--id-base": idBase = try number(argument, Int64.self)
      case "--notification-retry-compression":
        notificationRetryCompression = try number(argument, Double.self)
        guard notificationRetryCompression >= 1 else {
          throw HTTPServerError(message: "--notification-retry-compression must be >= 1")
        }
      case "--notification-timeout":
        notificationTimeoutSeconds = try number(argument, Double.self)
        guard notificationTimeoutSeconds > 0 else {
          throw HTTPServerError(message: "--notification-timeout must be > 0")
        }
      default:
        throw HTTPServerError(message: "unknown option '\(argument)'")
      }
    }
  }

  /// The simulator configuration these options describe.
  public var configuration: AppStoreSimulator.Configuration {
    AppStoreSimulator.Configuration(
      startMs: startMs, timeScale: timeScale, idBase: idBase,
      defaultNotificationURL: notifyURLDefault,
      notificationRetryCompression: notificationRetryCompression,
      notificationTimeoutSeconds: notificationTimeoutSeconds)
  }

  /// Starts the simulator and its HTTP server, writes the ready file, serves until SIGINT or
  /// SIGTERM, then stops gracefully.
  /// - Throws: ``HTTPServerError`` if the address cannot be bound or the ready file written.
  public func run() async throws(HTTPServerError) {
    var configuration = self.configuration
    do throws(SigningSetupError) {
      configuration.certificateAuthority = try SimulatorSigning.authority(directory: caDirectory)
    } catch {
      throw HTTPServerError(message: error.message)
    }
    let simulator = AppStoreSimulator(configuration: configuration)
    if let rootCAOut {
      do {
        try Data(simulator.rootCertificatePEM.utf8).write(
          to: URL(fileURLWithPath: rootCAOut), options: .atomic)
      } catch {
        throw HTTPServerError(message: "cannot write the root CA to '\(rootCAOut)': \(error)")
      }
    }
    if let stateFile, let data = FileManager.default.contents(atPath: stateFile) {
      do throws(SnapshotError) {
        try simulator.restore(snapshotJSON: Array(data))
      } catch {
        throw HTTPServerError(message: "cannot load state file '\(stateFile)': \(error.message)")
      }
    }
    var serverConfiguration = try HTTPServerConfiguration(listen: listen)
    serverConfiguration.maxBodySize = 4 << 20
    let server = try HTTPServer(configuration: serverConfiguration, router: simulator.router())
    if let readyFile {
      let text = "{\"http\":\"\(server.address)\"}\n"
      do {
        try Data(text.utf8).write(to: URL(fileURLWithPath: readyFile), options: .atomic)
      } catch {
        await server.stop()
        throw HTTPServerError(message: "cannot write ready file '\(readyFile)': \(error)")
      }
    }
    FileHandle.standardError.write(
      Data("appstore-sim listening on http://\(server.address)\n".utf8))
    await ProcessSignals.wait(for: [SIGINT, SIGTERM])
    await server.stop(gracePeriod: .seconds(5))
    simulator.shutdown()
    if let stateFile {
      do {
        try Data(simulator.snapshotJSON()).write(
          to: URL(fileURLWithPath: stateFile), options: .atomic)
      } catch {
        throw HTTPServerError(message: "cannot save state file '\(stateFile)': \(error)")
      }
    }
  }
}

