import Foundation
import RPCCore
import SubstatusWire
import Testing

/// Issue 30, attacks 7 (address part) and 8 (control characters), against a real substatusd
/// without `--allow-private-webhooks`: CreateWebhook refuses the IANA special-purpose ranges and
/// the machine's own addresses; names, descriptions, display names, catalog ids and URLs refuse
/// control characters; and the real `substatus` CLI shows names stored before that rule escaped,
/// never as raw control bytes (README "Webhooks", "Request limits and whole strings").
@Suite(.serialized) struct NamesAndAddressesEndToEndTests {
  /// Runs `body` against a fresh substatusd, then checks that it exits cleanly.
  static func withDaemon(_ body: (RunningDaemon, DaemonClient) async throws -> Void) async throws {
    let daemon = try await RunningDaemon()
    do { try await body(daemon, try DaemonClient(daemon)) } catch {
      _ = await daemon.stop()
      throw error
    }
    let (status, log) = await daemon.stop()
    #expect(status == 0, "substatusd exited \(status): \(log.suffix(2000))")
  }

  static func createWebhook(_ client: DaemonClient, _ app: String, _ url: String, key: String)
    async throws
    -> Substatus_V1_CreateWebhookResponse
  {
    var request = Substatus_V1_CreateWebhookRequest()
    request.appID = app
    request.url = url
    return try await client.call(Substatus_V1_EventService.createWebhook, request, key: key)
  }

  /// The machine's own addresses as `ip -o addr` lists them, loopback and link-local left out
  /// (link-local needs a zone, which a URL may not name).
  static func ownAddresses() async throws -> [String] {
    // iproute2 is part of every Debian install; without it only the listed ranges are tried (the
    // own-address rule has its unit tests on an injected list).
    guard let ip = ["/usr/bin/ip", "/bin/ip", "/sbin/ip"].first(where: FileManager.default.isExecutableFile(atPath:))
    else { return [] }
    let (status, out, err) = try await runProcess(ip, ["-o", "addr"])
    try #require(status == 0, "ip -o addr: \(err)")
    return out.split(separator: "\n").compactMap { line -> String? in
      let fields = line.split(separator: " ", omittingEmptySubsequences: true)
      guard let at = fields.firstIndex(where: { $0 == "inet" || $0 == "inet6" }),
        at + 1 < fields.count
      else { return nil }
      let address = String(fields[at + 1].split(separator: "/")[0])
      guard !address.hasPrefix("127."), address != "::1", !address.lowercased().hasPrefix("fe80:")
      else { return nil }
      return address
    }
  }

  @Test func createWebhookRefusesSpecialPurposeAndOwnAddresses() async throws {
    let own = try await Self.ownAddresses()
    try await Self.withDaemon { daemon, client in
      let (admin, app) = try await client.makeApp(
        operatorKey: daemon.operatorKey, bundleID: "com.example.hooks", appleAppID: 0)
      let special: [(String, String)] = [
        ("http://198.18.0.1/", "benchmarking"), ("http://198.19.255.254:8080/x", "benchmarking"),
        ("http://192.0.0.1/", "IETF protocol assignment"),
        ("http://192.0.0.9/", "IETF protocol assignment"),
        ("http://192.0.2.1/", "documentation"), ("http://198.51.100.1/", "documentation"),
        ("http://203.0.113.1/", "documentation"), ("http://192.88.99.1/", "6to4 relay anycast"),
        ("http://[2002:c000:0201::1]/", "6to4"), ("http://[2002:0808:0808::1]/", "6to4"),
        ("http://[64:ff9b:1::a00:1]/", "local-use IPv4/IPv6 translation"),
        ("http://[64:ff9b::c612:1]/", "benchmarking"),
        ("http://[::ffff:203.0.113.9]/", "documentation"),
        ("http://[2001:db8::1]/", "documentation"), ("http://[3fff::1]/", "documentation"),
        ("http://[2001:2::1]/", "benchmarking"), ("http://[2001::1]/", "Teredo"),
        ("http://[100::1]/", "discard-only"),
        ("http://[5f00::1]/", "SRv6 SIDs"), ("http://[ff0e::1]/", "multicast"),
        ("http://240.0.0.1/", "reserved"),
      ]
      let ownURLs = own.map {
        ($0.contains(":") ? "http://[\($0)]:8080/hook" : "http://\($0):8080/hook", "")
      }
      for (url, kind) in special + ownURLs {
        let error = await expectCode(.invalidArgument, url) {
          _ = try await Self.createWebhook(client, app, url, key: admin)
        }
        #expect(
          error?.message.hasPrefix("url: the address ") == true, "\(url): \(error?.message ?? "")")
        if !kind.isEmpty {
          #expect(error?.message.contains("is \(kind)") == true, "\(url): \(error?.message ?? "")")
        }
      }
      var list = Substatus_V1_ListWebhooksRequest()
      list.appID = app
      #expect(
        try await client.call(Substatus_V1_EventService.listWebhooks, list, key: admin).webhooks
          .isEmpty)
      // A public name and a public address stay accepted: the refusals above are the rules', not a
      // refusal of everything.
      _ = try await Self.createWebhook(
        client, app, "https://hooks.example.com/substatus", key: admin)
      _ = try await Self.createWebhook(client, app, "http://93.184.216.34/hook", key: admin)
    }
  }

  @Test func controlCharactersAreRefusedInNamesDescriptionsAndURLs() async throws {
    try await Self.withDaemon { daemon, client in
      let (admin, app) = try await client.makeApp(
        operatorKey: daemon.operatorKey, bundleID: "com.example.names", appleAppID: 0)
      func snapshot() async throws -> [[UInt8]] {
        var apps = Substatus_V1_ListAppsRequest()
        apps.pageSize = 100
        var hooks = Substatus_V1_ListWebhooksRequest()
        hooks.appID = app
        var products = Substatus_V1_ListProductsRequest()
        products.appID = app
        var entitlements = Substatus_V1_ListEntitlementsRequest()
        entitlements.appID = app
        return [
          try await client.call(
            Substatus_V1_TenantService.listTenants, Substatus_V1_ListTenantsRequest(),
            key: daemon.operatorKey
          )
          .serializedBytes(),
          try await client.call(Substatus_V1_AdminService.listApps, apps, key: admin)
            .serializedBytes(),
          try await client.call(
            Substatus_V1_AdminService.listApiKeys, Substatus_V1_ListApiKeysRequest(), key: admin
          ).serializedBytes(),
          try await client.call(Substatus_V1_EventService.listWebhooks, hooks, key: admin)
            .serializedBytes(),
          try await client.call(Substatus_V1_AdminService.listProducts, products, key: admin)
            .serializedBytes(),
          try await client.call(
            Substatus_V1_AdminService.listEntitlements, entitlements, key: admin
          ).serializedBytes(),
        ]
      }
      let before = try await snapshot()
      for bad in [
        "\u{1B}[31mred", "line\r\nX-Injected: 1", "bell\u{07}", "del\u{7F}", "csi\u{9B}2J",
      ] {
        let calls: [(String, () async throws -> Void)] = [
          (
            "name",
            {
              var r = Substatus_V1_CreateTenantRequest()
              r.name = "acme " + bad
              _ = try await client.call(
                Substatus_V1_TenantService.createTenant, r, key: daemon.operatorKey)
            }
          ),
          (
            "display_name",
            {
              var r = Substatus_V1_RegisterAppRequest()
              r.bundleID = "com.example.other"
              r.displayName = bad
              _ = try await client.call(Substatus_V1_AdminService.registerApp, r, key: admin)
            }
          ),
          (
            "app.display_name",
            {
              var r = Substatus_V1_UpdateAppRequest()
              r.appID = app
              var values = Substatus_V1_App()
              values.displayName = bad
              r.app = values
              r.updateMask = ["display_name"]
              _ = try await client.call(Substatus_V1_AdminService.updateApp, r, key: admin)
            }
          ),
          (
            "description",
            {
              var r = Substatus_V1_CreateApiKeyRequest()
              r.role = .read
              r.description = bad
              _ = try await client.call(Substatus_V1_AdminService.createApiKey, r, key: admin)
            }
          ),
          (
            "url",
            {
              _ = try await Self.createWebhook(
                client, app, "https://hooks.example.com/" + bad, key: admin)
            }
          ),
          (
            "entitlements[0].display_name",
            {
              var e = Substatus_V1_EntitlementDefinition()
              e.entitlementID = "pro"
              e.displayName = bad
              e.productIDs = ["pro.monthly"]
              var r = Substatus_V1_PutEntitlementsRequest()
              r.appID = app
              r.entitlements = [e]
              _ = try await client.call(Substatus_V1_AdminService.putEntitlements, r, key: admin)
            }
          ),
          (
            "products[0].product_id",
            {
              var p = Substatus_V1_Product()
              p.productID = "pro." + bad
              p.type = .consumable
              var r = Substatus_V1_PutProductsRequest()
              r.appID = app
              r.products = [p]
              _ = try await client.call(Substatus_V1_AdminService.putProducts, r, key: admin)
            }
          ),
        ]
        for (field, call) in calls {
          let error = await expectCode(.invalidArgument, "\(field) = \(bad.debugDescription)", call)
          #expect(
            error?.message == "\(field): contains control characters",
            "\(field) = \(bad.debugDescription)")
        }
      }
      // Bidirectional overrides in display text.
      let error = await expectCode(.invalidArgument, "RLO") {
        var r = Substatus_V1_RegisterAppRequest()
        r.bundleID = "com.example.rlo"
        r.displayName = "invoice\u{202E}fdp.exe"
        _ = try await client.call(Substatus_V1_AdminService.registerApp, r, key: admin)
      }
      #expect(
        error?.message.hasPrefix("display_name: contains bidirectional formatting characters")
          == true)
      #expect(try await snapshot() == before, "a refused request changed what is stored")
    }
  }

  /// Names stored before the rule (written into the daemon's SQLite file while it was down) come
  /// back from the server as they are; the real `substatus` binary prints them escaped.
  @Test func theCLIPrintsStoredControlCharactersEscaped() async throws {
    let python = packageRoot.appendingPathComponent(".venv/bin/python").path
    try #require(
      FileManager.default.isExecutableFile(atPath: python), "run scripts/install-deps --test")
    let cli = try builtExecutable("substatus")
    let first = try await RunningDaemon()
    let client = try DaemonClient(first)
    let (admin, app) = try await client.makeApp(
      operatorKey: first.operatorKey, bundleID: "com.example.stored", appleAppID: 0)
    _ = try await Self.createWebhook(client, app, "https://hooks.example.com/substatus", key: admin)
    var key = Substatus_V1_CreateApiKeyRequest()
    key.role = .read
    key.description = "billing"
    _ = try await client.call(Substatus_V1_AdminService.createApiKey, key, key: admin)
    await first.kill()

    let database = first.directory.appendingPathComponent("data/substatus.sqlite").path
    let sql = packageRoot.appendingPathComponent(
      "Tests/SubstatusDaemonTests/Fixtures/hostile_names.sql"
    ).path
    let (status, _, err) = try await run(
      python,
      [
        "-c",
        "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.executescript(open(sys.argv[2]).read()); c.commit()",
        database, sql,
      ])
    try #require(status == 0, "hostile_names.sql: \(err)")

    let daemon = try await RunningDaemon(reusing: first.directory)
    let commands: [([String], String)] = [
      (["app", "list"], admin), (["app", "show", app], admin), (["key", "list"], admin),
      (["webhook", "list", app], admin), (["tenant", "list"], daemon.operatorKey),
    ]
    for (arguments, key) in commands {
      for json in [false, true] {
        let (status, out, err) = try await run(
          cli, ["--addr", daemon.grpc, "--key", key] + arguments + (json ? ["--json"] : []))
        #expect(status == 0, "\(arguments): \(err)")
        let raw = out.unicodeScalars.filter {
          $0 != "\n" && ($0.value < 0x20 || (0x7F...0x9F).contains($0.value) || $0 == "\u{202E}")
        }
        #expect(
          raw.isEmpty,
          "\(arguments) json=\(json) printed raw control characters: \(out.debugDescription)")
        #expect(out.contains(json ? "\\u001b" : "\\u{1B}"), "\(arguments) json=\(json): \(out)")
      }
    }
    let (exit, log) = await daemon.stop()
    #expect(exit == 0, "substatusd exited \(exit): \(log.suffix(2000))")
  }
}

/// Expects an RPC to fail with `code`; returns the error.
@discardableResult
func expectCode(_ code: RPCError.Code, _ what: String, _ call: () async throws -> Void) async
  -> RPCError?
{
  do {
    try await call()
    Issue.record("\(what): expected \(code), got OK")
  } catch let error as RPCError {
    #expect(error.code == code, "\(what): \(error)")
    return error
  } catch {
    Issue.record("\(what): \(error)")
  }
  return nil
}
