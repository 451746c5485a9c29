import Foundation
import HTTPServer
import Testing
@testable import SubstatusConsole

/// The console's HTTP answers: every file of `Assets/` served with its type, the security headers
/// on every answer (404s included), revalidation by ETag, Chart.js from its installed path or 404.
@Suite struct WebConsoleTests {
  static let assets = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().appendingPathComponent("Sources/SubstatusConsole/Assets")

  static func router(chartJSPath: String = "/nonexistent/chart.min.js") -> HTTPRouter {
    var router = HTTPRouter()
    WebConsole(chartJSPath: chartJSPath).register(in: &router)
    return router
  }

  static func get(_ path: String, _ router: HTTPRouter, headers: HTTPHeaders = [:]) async -> HTTPResponse {
    await router.respond(to: HTTPRequest(method: "GET", path: path, headers: headers))
  }

  static func expectSecurityHeaders(_ response: HTTPResponse, _ path: String) {
    #expect(response.headers["Content-Security-Policy"] == WebConsole.contentSecurityPolicy, "\(path)")
    #expect(response.headers["X-Content-Type-Options"] == "nosniff", "\(path)")
    #expect(response.headers["Referrer-Policy"] == "no-referrer", "\(path)")
  }

  @Test func everyAssetIsServedWithItsTypeAndTheSameBytes() async throws {
    let names = try FileManager.default.contentsOfDirectory(atPath: Self.assets.path).sorted()
    #expect(Set(names) == Set(WebConsole().files.keys), "Assets/ and ConsoleAssets.files differ")
    let router = Self.router()
    for name in names {
      let path = name == "index.html" ? "/console" : "/console/\(name)"
      let response = await Self.get(path, router)
      #expect(response.status == 200, "\(path)")
      #expect(response.body == Array(try Data(contentsOf: Self.assets.appendingPathComponent(name))), "\(path)")
      let type = name.hasSuffix(".html") ? "text/html; charset=utf-8"
        : name.hasSuffix(".css") ? "text/css; charset=utf-8"
        : name.hasSuffix(".svg") ? "image/svg+xml" : "text/javascript; charset=utf-8"
      #expect(response.headers["Content-Type"] == type, "\(path)")
      #expect(response.headers["Cache-Control"] == "no-cache", "\(path)")
      Self.expectSecurityHeaders(response, path)
    }
  }

  @Test func policyAllowsNothingButThisOrigin() {
    let directives = Dictionary(uniqueKeysWithValues: WebConsole.contentSecurityPolicy.split(separator: ";").map { part in
      let words = part.split(separator: " ").map(String.init)
      return (words[0], Array(words.dropFirst()))
    })
    #expect(directives["default-src"] == ["'self'"])
    #expect(directives["script-src"] == ["'self'"])
    #expect(directives["style-src"] == ["'self'"])
    #expect(directives["connect-src"] == ["'self'"])
    #expect(directives["frame-ancestors"] == ["'none'"])
    #expect(!WebConsole.contentSecurityPolicy.contains("unsafe"))
  }

  @Test func unchangedFilesAnswer304() async throws {
    let router = Self.router()
    let first = await Self.get("/console/main.js", router)
    let etag = try #require(first.headers["ETag"])
    let again = await Self.get("/console/main.js", router, headers: ["If-None-Match": "\"other\", \(etag)"])
    #expect(again.status == 304 && again.body.isEmpty)
    #expect(again.headers["ETag"] == etag)
    Self.expectSecurityHeaders(again, "304")
    let stale = await Self.get("/console/main.js", router, headers: ["If-None-Match": "\"0000000000000000\""])
    #expect(stale.status == 200 && stale.body == first.body)
  }

  @Test(arguments: ["/console/nope.js", "/console/..", "/console/vendor/chart.min.js"])
  func missingFilesAre404WithTheSameHeaders(path: String) async {
    let response = await Self.get(path, Self.router())
    #expect(response.status == 404)
    Self.expectSecurityHeaders(response, path)
  }

  @Test func chartJSIsServedFromItsInstalledPath() async throws {
    let file = FileManager.default.temporaryDirectory.appendingPathComponent("chart-\(UUID().uuidString).js")
    try Data("window.Chart = function () {};\n".utf8).write(to: file)
    defer { try? FileManager.default.removeItem(at: file) }
    let response = await Self.get("/console/vendor/chart.min.js", Self.router(chartJSPath: file.path))
    #expect(response.status == 200)
    #expect(response.headers["Content-Type"] == "text/javascript; charset=utf-8")
    #expect(response.body == Array("window.Chart = function () {};\n".utf8))
    Self.expectSecurityHeaders(response, "chart")
  }

  /// What the policy forbids never appears in the files: inline scripts, style attributes or
  /// elements, inline handlers; nor what would turn text into code or markup.
  @Test func noInlineCodeOrMarkupFromText() throws {
    let html = try String(contentsOf: Self.assets.appendingPathComponent("index.html"), encoding: .utf8)
    #expect(html.components(separatedBy: "<script").dropFirst().allSatisfy { $0.hasPrefix(" src=") || $0.hasPrefix(" type=\"module\" src=") })
    #expect(!html.contains("<style") && !html.contains(" style=") && html.range(of: #" on[a-z]+="#, options: .regularExpression) == nil)
    for name in try FileManager.default.contentsOfDirectory(atPath: Self.assets.path) where name.hasSuffix(".js") {
      let js = try String(contentsOf: Self.assets.appendingPathComponent(name), encoding: .utf8)
      for forbidden in ["innerHTML", "outerHTML", "insertAdjacentHTML", "eval(", "new Function", "document.write", "localStorage", "document.cookie", ".style."] {
        #expect(!js.contains(forbidden), "\(name) uses \(forbidden)")
      }
    }
  }
}
