import RPCCore
import SubstatusWire
import Testing

@testable import SubstatusService

/// Names are text (README "Request limits and whole strings"): every name, description, display
/// name, catalog id and webhook URL a client sets refuses control characters, and display text
/// refuses bidirectional formatting characters, with INVALID_ARGUMENT naming the field; nothing
/// is stored.
@Suite struct DisplayTextTests {
  /// A field a client sets, and the call that sets it to a value.
  struct Field: Sendable, CustomTestStringConvertible {
    let name: String
    /// Display text (bidi formatting refused too), not an identifier.
    let isDisplayText: Bool
    let set: @Sendable (Harness, String, String, String) async throws -> Void
    var testDescription: String { name }
  }

  static func product(_ id: String, group: String = "g1", offers: [String] = [])
    -> Substatus_V1_Product
  {
    var p = Substatus_V1_Product()
    p.productID = id
    p.type = .autoRenewable
    p.subscriptionGroupID = group
    p.promotionalOfferIDs = offers
    return p
  }

  static let fields: [Field] = [
    Field(name: "name", isDisplayText: true) { h, _, _, value in
      var r = Substatus_V1_CreateTenantRequest()
      r.name = "x" + value
      _ = try await h.call(Substatus_V1_TenantService.createTenant, r, key: h.operatorKey)
    },
    Field(name: "display_name", isDisplayText: true) { h, admin, _, value in
      var r = Substatus_V1_RegisterAppRequest()
      r.bundleID = "com.example.other"
      r.displayName = value
      _ = try await h.call(Substatus_V1_AdminService.registerApp, r, key: admin)
    },
    Field(name: "app.display_name", isDisplayText: true) { h, admin, app, value in
      var r = Substatus_V1_UpdateAppRequest()
      r.appID = app
      var values = Substatus_V1_App()
      values.displayName = value
      r.app = values
      r.updateMask = ["display_name"]
      _ = try await h.call(Substatus_V1_AdminService.updateApp, r, key: admin)
    },
    Field(name: "description", isDisplayText: true) { h, admin, _, value in
      var r = Substatus_V1_CreateApiKeyRequest()
      r.role = .read
      r.description = value
      _ = try await h.call(Substatus_V1_AdminService.createApiKey, r, key: admin)
    },
    Field(name: "entitlements[0].display_name", isDisplayText: true) { h, admin, app, value in
      var e = Substatus_V1_EntitlementDefinition()
      e.entitlementID = "premium"
      e.displayName = value
      e.productIDs = ["premium.monthly"]
      var r = Substatus_V1_PutEntitlementsRequest()
      r.appID = app
      r.entitlements = [e]
      _ = try await h.call(Substatus_V1_AdminService.putEntitlements, r, key: admin)
    },
    Field(name: "url", isDisplayText: true) { h, admin, app, value in
      var r = Substatus_V1_CreateWebhookRequest()
      r.appID = app
      r.url = "https://hooks.example.com/" + value
      _ = try await h.call(Substatus_V1_EventService.createWebhook, r, key: admin)
    },
    Field(name: "products[0].product_id", isDisplayText: false) { h, admin, app, value in
      var r = Substatus_V1_PutProductsRequest()
      r.appID = app
      r.products = [product("p" + value)]
      _ = try await h.call(Substatus_V1_AdminService.putProducts, r, key: admin)
    },
    Field(name: "products[0].subscription_group_id", isDisplayText: false) { h, admin, app, value in
      var r = Substatus_V1_PutProductsRequest()
      r.appID = app
      r.products = [product("p", group: "g" + value)]
      _ = try await h.call(Substatus_V1_AdminService.putProducts, r, key: admin)
    },
    Field(name: "products[0].promotional_offer_ids[0]", isDisplayText: false) {
      h, admin, app, value in
      var r = Substatus_V1_PutProductsRequest()
      r.appID = app
      r.products = [product("p", offers: ["o" + value])]
      _ = try await h.call(Substatus_V1_AdminService.putProducts, r, key: admin)
    },
    Field(name: "user_id", isDisplayText: false) { h, admin, app, value in
      var r = Substatus_V1_GetStatusRequest()
      r.appID = app
      r.userID = "u" + value
      _ = try await h.call(Substatus_V1_StatusService.getStatus, r, key: admin)
    },
  ]

  /// ESC (a terminal escape), LF and CR (forged lines, header injection), BEL, tab, DEL and C1
  /// (NEL; CSI, which 8-bit terminals act on).
  static let controls = [
    "\u{1B}[31mred", "line\nbreak", "cr\rlf", "bell\u{07}", "tab\tin", "del\u{7F}", "nel\u{85}",
    "csi\u{9B}31m",
  ]

  @Test(arguments: fields, controls)
  func controlCharactersAreRefusedNamingTheField(_ field: Field, _ value: String) async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let error = await expectStatus(.invalidArgument, "\(field.name) = \(value.debugDescription)")
      {
        try await field.set(h, admin, app, value)
      }
      #expect(error?.message == "\(field.name): contains control characters")
    }
  }

  /// RLO, LRO, the isolates: they reorder the text that follows them on screen.
  @Test(
    arguments: fields.filter(\.isDisplayText),
    ["evil\u{202E}txt.exe", "\u{202A}a", "\u{2066}b\u{2069}"])
  func bidirectionalFormattingIsRefusedInDisplayText(_ field: Field, _ value: String) async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      let error = await expectStatus(.invalidArgument, "\(field.name) = \(value.debugDescription)")
      {
        try await field.set(h, admin, app, value)
      }
      #expect(
        error?.message.hasPrefix("\(field.name): contains bidirectional formatting characters")
          == true)
    }
  }

  /// Text in any script, emoji and a right-to-left name (with the implicit marks, which are not
  /// overrides) stays accepted.
  @Test(arguments: fields.filter { $0.name != "url" }, ["Ünïcode — 日本 🎉", "שלום\u{200F}"])
  func textInAnyScriptIsAccepted(_ field: Field, _ value: String) async throws {
    try await withService { h in
      let (admin, app) = try await h.makeTenantWithApp()
      do {
        try await field.set(h, admin, app, value)
      } catch let error as RPCError {
        // GetStatus of an unknown user, say, may fail for its own reasons, never for the text.
        #expect(!error.message.contains("contains"), "\(field.name): \(error.message)")
      }
    }
  }

  @Test func controlTablesMatchUnicodeCc() {
    for value in UInt32(0)...0x2100 {
      guard let scalar = Unicode.Scalar(value) else { continue }
      #expect(
        DisplayText.isControl(scalar) == (scalar.properties.generalCategory == .control),
        "U+\(String(value, radix: 16))")
      #expect(
        DisplayText.hasControl(String(scalar)) == DisplayText.isControl(scalar),
        "U+\(String(value, radix: 16))")
    }
  }
}
