import Foundation
import HTTPServer
import Synchronization

/// The web console (docs/architecture.md "The console"): static HTML, CSS and JavaScript modules
/// served under `/console` on the HTTP listener, calling the API over Connect JSON from the same
/// origin.
///
/// The files are compiled into the binary (SwiftPM's `embedInCode` resources of this target), so
/// the daemon serves them wherever it is installed, with no resource bundle to find at run time and
/// no build step of their own. Chart.js is Debian's (`libjs-chart.js`), read from its installed
/// path on first use and served as `/console/vendor/chart.min.js`; when it is missing that file
/// answers 404 and the reports page shows its counts as a table only.
///
/// Every answer carries a strict Content-Security-Policy (only this origin's scripts, styles,
/// images and API; no inline script or style; no framing), `X-Content-Type-Options: nosniff` and
/// `Referrer-Policy: no-referrer`; files are revalidated on each use (`Cache-Control: no-cache`
/// with an `ETag`, answered 304 when unchanged), so a new daemon's console is picked up at once.
public final class WebConsole: Sendable {
  /// One file the console serves.
  public struct File: Sendable {
    /// The bytes.
    public let body: [UInt8]
    /// Its `Content-Type`.
    public let contentType: String
    /// A strong validator of the bytes (`"<hex>"`).
    public let etag: String

    /// Wraps `body` with its content type, computing the validator.
    public init(body: [UInt8], contentType: String) {
      self.body = body
      self.contentType = contentType
      self.etag = "\"\(Self.fingerprint(body))\""
    }

    /// 64-bit FNV-1a of the bytes, hex: a cache validator, not a security measure.
    static func fingerprint(_ bytes: [UInt8]) -> String {
      var hash: UInt64 = 0xcbf2_9ce4_8422_2325
      for byte in bytes {
        hash ^= UInt64(byte)
        hash = hash &* 0x0000_0100_0000_01b3
      }
      let hex = String(hash, radix: 16)
      return String(repeating: "0", count: 16 - hex.count) + hex
    }
  }

  /// The Content-Security-Policy of every console answer: nothing but this origin, no inline code.
  public static let contentSecurityPolicy =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    + "font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

  /// Where Debian's `libjs-chart.js` installs Chart.js's UMD build.
  public static let defaultChartJSPath = "/usr/share/javascript/chart.js/chart.min.js"

  /// The console's own files by name (`index.html` is `/console`).
  public let files: [String: File]
  private let chartJSPath: String
  private let chartJS = Mutex<File?>(nil)

  /// A console serving the embedded files and Chart.js from `chartJSPath`.
  public convenience init(chartJSPath: String = WebConsole.defaultChartJSPath) {
    self.init(files: ConsoleAssets.files, chartJSPath: chartJSPath)
  }

  /// A console serving `files` (tests pass their own).
  public init(files: [String: File], chartJSPath: String) {
    self.files = files
    self.chartJSPath = chartJSPath
  }

  /// Adds `GET /console`, `GET /console/{file}` and `GET /console/vendor/chart.min.js` to `router`
  /// (HEAD too: the router answers it from GET).
  public func register(in router: inout HTTPRouter) {
    router.add("GET", "/console") { request in self.respond(self.files["index.html"], request) }
    router.add("GET", "/console/{file}") { request in
      self.respond(self.files[request.pathParameters["file"] ?? ""], request)
    }
    router.add("GET", "/console/vendor/chart.min.js") { request in self.respond(self.loadChartJS(), request) }
  }

  /// Chart.js, read once; `nil` while the file is missing (read again on the next request, so
  /// installing the package needs no restart).
  func loadChartJS() -> File? {
    if let cached = chartJS.withLock({ $0 }) { return cached }
    guard let data = FileManager.default.contents(atPath: chartJSPath) else { return nil }
    let file = File(body: Array(data), contentType: "text/javascript; charset=utf-8")
    chartJS.withLock { $0 = file }
    return file
  }

  /// The answer for `file` (404 when `nil`), with the console's security and caching headers.
  func respond(_ file: File?, _ request: HTTPRequest) -> HTTPResponse {
    var response: HTTPResponse
    if let file {
      let matches = request.headers["If-None-Match"].map { header in
        header.split(separator: ",").contains { $0.trimmingCharacters(in: .whitespaces) == file.etag }
      } ?? false
      response = matches ? HTTPResponse(status: 304) : HTTPResponse(status: 200, body: file.body)
      if !matches { response.headers.add(name: "Content-Type", value: file.contentType) }
      response.headers.add(name: "ETag", value: file.etag)
      response.headers.add(name: "Cache-Control", value: "no-cache")
    } else {
      response = HTTPResponse.text("not found: \(request.path)\n", status: 404)
      response.headers.add(name: "Cache-Control", value: "no-store")
    }
    response.headers.add(name: "Content-Security-Policy", value: Self.contentSecurityPolicy)
    response.headers.add(name: "X-Content-Type-Options", value: "nosniff")
    response.headers.add(name: "Referrer-Policy", value: "no-referrer")
    response.headers.add(name: "X-Frame-Options", value: "DENY")
    return response
  }
}
