/// The console's files, compiled into the binary from `Assets/` (SwiftPM `embedInCode`: each file
/// becomes a `PackageResources` byte array named after it). A file added to `Assets/` must be
/// listed here; `WebConsoleTests` checks that every file of the directory is served.
enum ConsoleAssets {
  static let files: [String: WebConsole.File] = [
    "index.html": .init(body: PackageResources.index_html, contentType: "text/html; charset=utf-8"),
    "console.css": .init(body: PackageResources.console_css, contentType: "text/css; charset=utf-8"),
    "main.js": .init(body: PackageResources.main_js, contentType: "text/javascript; charset=utf-8"),
    "api.js": .init(body: PackageResources.api_js, contentType: "text/javascript; charset=utf-8"),
    "ui.js": .init(body: PackageResources.ui_js, contentType: "text/javascript; charset=utf-8"),
    "apps.js": .init(body: PackageResources.apps_js, contentType: "text/javascript; charset=utf-8"),
    "catalog.js": .init(body: PackageResources.catalog_js, contentType: "text/javascript; charset=utf-8"),
    "keys.js": .init(body: PackageResources.keys_js, contentType: "text/javascript; charset=utf-8"),
    "user.js": .init(body: PackageResources.user_js, contentType: "text/javascript; charset=utf-8"),
    "timeline.js": .init(body: PackageResources.timeline_js, contentType: "text/javascript; charset=utf-8"),
    "favicon.svg": .init(body: PackageResources.favicon_svg, contentType: "image/svg+xml"),
    "reports.js": .init(body: PackageResources.reports_js, contentType: "text/javascript; charset=utf-8"),
    "events.js": .init(body: PackageResources.events_js, contentType: "text/javascript; charset=utf-8"),
    "webhooks.js": .init(body: PackageResources.webhooks_js, contentType: "text/javascript; charset=utf-8"),
    "retention.js": .init(body: PackageResources.retention_js, contentType: "text/javascript; charset=utf-8"),
  ]
}
