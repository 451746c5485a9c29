import RPCCore
import SubstatusClientTestKit
import SubstatusWire
import Testing

@testable import SubstatusCLI

/// The CLI never prints a raw control byte (README "Request limits and whole strings"): a server
/// that returns names stored before they were refused (or any server at all) cannot move the
/// cursor, retitle the terminal or forge table rows through `substatus`.
@Suite("substatus shows control characters, never sends them to the terminal")
struct TerminalTextTests {
  /// OSC "set the window title" ended by BEL, then a forged line; ESC [2J clears the screen; CSI
  /// in its 8-bit form; RLO reorders what follows.
  static let hostile =
    "\u{1B}]0;owned\u{07}Evil\r\nforged  row \u{1B}[2J\u{9B}31m\u{202E}txt.exe\u{7F}"

  @Test(arguments: [
    ("plain ascii", "plain ascii"),
    ("\u{1B}[31mred", "\\u{1B}[31mred"),
    ("a\r\nb\tc", "a\\u{D}\\u{A}b\\u{9}c"),
    ("bell\u{07} del\u{7F} nel\u{85} csi\u{9B}", "bell\\u{7} del\\u{7F} nel\\u{85} csi\\u{9B}"),
    ("rlo\u{202E} lri\u{2066} ls\u{2028}", "rlo\\u{202E} lri\\u{2066} ls\\u{2028}"),
    ("Ünïcode — 日本 🎉 ACTIVE→ACTIVE", "Ünïcode — 日本 🎉 ACTIVE→ACTIVE"),
  ])
  func visible(_ text: String, _ shown: String) {
    #expect(TerminalText.visible(text) == shown)
    if !text.contains("\n") {
      #expect(TerminalText.visibleKeepingLines(text + "\n") == shown + "\n")
    }
  }

  @Test func wholeOutputsKeepTheirLineFeedsOnly() {
    #expect(
      TerminalText.visibleKeepingLines("a\rb\r\nc\n\u{1B}d\r") == "a\\u{D}b\r\nc\n\\u{1B}d\\u{D}")
  }

  /// Whether `output` holds anything a terminal acts on besides line feeds.
  static func isInert(_ output: String) -> Bool {
    output.unicodeScalars.allSatisfy { scalar in
      let v = scalar.value
      if scalar == "\n" { return true }
      return
        !(v < 0x20 || (0x7F...0x9F).contains(v) || (0x2028...0x202E).contains(v)
        || (0x2066...0x2069).contains(v))
    }
  }

  static func router(log: CallLog) -> RPCRouter {
    var router = RPCRouter()
    let app = message(Substatus_V1_App.self) {
      $0.appID = "app_1"
      $0.bundleID = "com.example.app"
      $0.displayName = hostile
      $0.createdMs = newYear2026
    }
    router.fake(Substatus_V1_AdminService.listApps, log: log) { _, _ in message { $0.apps = [app] }
    }
    router.fake(Substatus_V1_AdminService.getApp, log: log) { request, _ in
      guard request.appID == "app_1" else {
        throw RPCError(code: .notFound, message: "app \"\(request.appID)\" not found: \(hostile)")
      }
      return message { $0.app = app }
    }
    router.fake(Substatus_V1_TenantService.listTenants, log: log) { _, _ in
      message {
        $0.tenants = [
          message {
            $0.tenantID = "ten_1"
            $0.name = hostile
            $0.createdMs = newYear2026
          }
        ]
      }
    }
    router.fake(Substatus_V1_AdminService.listApiKeys, log: log) { _, _ in
      message {
        $0.apiKeys = [
          message {
            $0.keyID = "key_1"
            $0.role = .read
            $0.description = hostile
          }
        ]
      }
    }
    router.fake(Substatus_V1_EventService.listWebhooks, log: log) { _, _ in
      message {
        $0.webhooks = [
          message {
            $0.webhookID = "wh_1"
            $0.url = "https://hooks.example.com/" + hostile
          }
        ]
      }
    }
    router.registerServerStreaming(
      method: Substatus_V1_EventService.watchEvents.path,
      request: Substatus_V1_WatchEventsRequest.self,
      response: Substatus_V1_WatchEventsResponse.self
    ) { request, responses, context in
      log.record(request.serializedBytes(), context)
      await responses.send(
        message {
          $0.event = message {
            $0.eventID = "ev_1"
            $0.userID = hostile
            $0.type = .renewed
          }
        })
    }
    return router
  }

  @Test(arguments: [
    ["app", "list"], ["app", "show", "app_1"], ["tenant", "list"], ["key", "list"],
    ["webhook", "list", "app_1"],
    ["events", "tail", "app_1"],
  ])
  func hostileValuesAreShownEscaped(_ arguments: [String]) async throws {
    for json in [false, true] {
      let run = try await withFakeServer(Self.router(log: CallLog())) { transport in
        await runCLI(arguments + (json ? ["--json"] : []), transport: transport)
      }
      #expect(run.status == 0, "\(run.stderr)")
      #expect(Self.isInert(run.stdout), "\(arguments) json=\(json): \(run.stdout.debugDescription)")
      if json {
        #expect(run.stdout.contains("\\u001b]0;owned\\u0007Evil\\r\\nforged"), "\(run.stdout)")
        #expect(run.stdout.contains("\\u009b31m\\u202etxt.exe\\u007f"), "\(run.stdout)")
      } else {
        #expect(
          run.stdout.contains(
            "\\u{1B}]0;owned\\u{7}Evil\\u{D}\\u{A}forged  row \\u{1B}[2J\\u{9B}31m\\u{202E}txt.exe\\u{7F}"
          ), "\(run.stdout)")
      }
    }
  }

  @Test func aServerErrorMessageIsShownEscapedOnOneLine() async throws {
    let run = try await withFakeServer(Self.router(log: CallLog())) { transport in
      await runCLI(["app", "show", "app_9"], transport: transport)
    }
    #expect(run.status == 1)
    #expect(Self.isInert(run.stderr), "\(run.stderr.debugDescription)")
    #expect(
      run.stderr.contains("not found: \\u{1B}]0;owned\\u{7}Evil forged  row \\u{1B}[2J"),
      "\(run.stderr)")
    #expect(run.stderr.hasSuffix("\n") && run.stderr.filter { $0 == "\n" }.count == 1)
  }
}
