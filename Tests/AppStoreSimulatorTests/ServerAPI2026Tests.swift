import AppStoreSimulator
import Foundation
import SubstatusJSON
import Testing

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// The Server API endpoints and limits of App Store Server API 1.16-1.22 over real HTTP: the
/// per-app rate limit (`429`, `Retry-After` in UNIX milliseconds), Set App Account Token's
/// errors, Send Consumption Information's validation.
@Suite("Server API 2025-2026")
struct ServerAPI2026Tests {
  /// A GET with the response's `Retry-After` header.
  func get(_ sim: Sim, _ path: String, token: String) async throws -> (status: Int, retryAfter: String?) {
    var request = URLRequest(url: URL(string: "http://\(sim.base)\(path)")!)
    request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
    let (_, response) = try await session.data(for: request)
    let http = try #require(response as? HTTPURLResponse)
    return (http.statusCode, http.value(forHTTPHeaderField: "Retry-After"))
  }

  @Test("past the app's rate: 429 with Retry-After, the UNIX ms of the next token", arguments: ["production", "sandbox"])
  func rateLimit(environment: String) async throws {
    let sim = try Sim()
    let app = "/control/apps/com.example.v2"
    let setting = environment == "production" ? "server_api_rate_limit" : "sandbox_server_api_rate_limit"
    try await sim.ok("POST", "/control/apps", catalogWithCommitment(notificationURL: nil))
    try await sim.ok("PATCH", app, #"{"\#(setting)":0.01}"#)
    let key = APIKey()
    try await key.register(sim)
    try await sim.ok("POST", "/control/users", #"{"user_id":"u","environment":"\#(environment)"}"#)
    let id = try #require(
      try await sim.ok("POST", "\(app)/users/u/purchase", #"{"product_id":"coins"}"#)[
        "transactions"]?[0]?["transaction_id"]?.string)
    let base = environment == "production" ? "" : "/sandbox"
    let token = try key.token()
    #expect(try await get(sim, "\(base)/inApps/v1/transactions/\(id)", token: token).status == 200)
    let limited = try await get(sim, "\(base)/inApps/v1/transactions/\(id)", token: token)
    #expect(limited.status == 429)
    let retryAfter = try #require(limited.retryAfter.flatMap { Int64($0) })
    #expect(retryAfter > startMs && retryAfter <= startMs + 100_000)
    // The other environment has its own bucket.
    let other = environment == "production" ? "/sandbox" : ""
    #expect(try await get(sim, "\(other)/inApps/v1/transactions/\(id)", token: token).status == 404)
    try await sim.ok("POST", "/control/clock/set", #"{"now_ms":\#(retryAfter)}"#)
    #expect(try await get(sim, "\(base)/inApps/v1/transactions/\(id)", token: token).status == 200)
    let stats = try await sim.ok("GET", "/control/server-api/rate-limit")
    #expect(stats[environment]?["limited"] == .integer(1))
    await sim.stop()
  }

  @Test("Apple's default in production: a burst of 50 requests passes (a sandbox-sized bucket would not)")
  func defaultProductionBurst() async throws {
    let sim = try Sim()
    try await sim.ok("POST", "/control/apps", catalogWithCommitment(notificationURL: nil))
    let key = APIKey()
    try await key.register(sim)
    try await sim.ok("POST", "/control/users", #"{"user_id":"u","environment":"production"}"#)
    let token = try key.token()
    var statuses: [Int] = []
    // No transaction needed: 404 counts against the limit like any answer.
    for _ in 0..<60 { statuses.append(try await get(sim, "/inApps/v1/transactions/1", token: token).status) }
    // The bucket refills in real time too (50 a second), so how many of the last 10 are limited
    // depends on the machine's speed; the first 50 never are.
    #expect(statuses.prefix(50).allSatisfy { $0 == 404 })
    #expect(statuses.allSatisfy { $0 == 404 || $0 == 429 })
    await sim.stop()
  }

  @Test("Set App Account Token: the original transaction and its renewals get it; Apple's errors otherwise")
  func setAppAccountToken() async throws {
    let sim = try Sim()
    let app = "/control/apps/com.example.v2"
    try await sim.ok("POST", "/control/apps", catalogWithCommitment(notificationURL: nil))
    let key = APIKey()
    try await key.register(sim)
    for user in ["u", "a"] {
      try await sim.ok("POST", "/control/users", #"{"user_id":"\#(user)","environment":"production"}"#)
    }
    let original = try #require(
      try await sim.ok("POST", "\(app)/users/u/purchase", #"{"product_id":"pro.monthly"}"#)[
        "transactions"]?[0]?["transaction_id"]?.string)
    let renewal = try #require(
      try await sim.advance(#"{"days":31}"#)["transactions"]?[0]?["transaction_id"]?.string)
    let assigned = try #require(
      try await sim.ok("POST", "\(app)/users/a/assign", #"{"product_id":"lifetime"}"#)[
        "transactions"]?[0]?["transaction_id"]?.string)
    let token = "8D2A3E33-6F3C-4A47-9C45-0B4B2E6A1F00"
    func put(_ id: String, _ body: String) async throws -> (Int, JSONValue) {
      let (status, json, _) = try await api(
        "PUT", sim.base, "/inApps/v1/transactions/\(id)/appAccountToken", token: try key.token(), body: body)
      return (status, json)
    }
    var (status, body) = try await put(original, #"{"appAccountToken":"not-a-uuid"}"#)
    #expect(status == 400 && body["errorCode"] == .integer(4_000_183))
    (status, body) = try await put(renewal, #"{"appAccountToken":"\#(token)"}"#)
    #expect(status == 400 && body["errorCode"] == .integer(4_000_187))
    (status, body) = try await put(assigned, #"{"appAccountToken":"\#(token)"}"#)
    #expect(status == 400 && body["errorCode"] == .integer(4_000_188))
    (status, body) = try await put("999", #"{"appAccountToken":"\#(token)"}"#)
    #expect(status == 404 && body["errorCode"] == .integer(4_040_010))
    (status, _) = try await put(original, #"{"appAccountToken":"\#(token)"}"#)
    #expect(status == 200)
    let signed = try await sim.ok("GET", "\(app)/users/u/signed-transactions")
    let tokens = signed["transactions"]?.arrayValue?.map { $0["appAccountToken"]?.string }
    #expect(tokens == [token.lowercased(), token.lowercased()])
    #expect(signed["renewal_info"]?[0]?["appAccountToken"]?.string == token.lowercased())
    // Renewals after it carry it too.
    try await sim.advance(#"{"days":31}"#)
    let later = try await sim.ok("GET", "\(app)/users/u/signed-transactions")
    #expect(later["transactions"]?.arrayValue?.last?["appAccountToken"]?.string == token.lowercased())
    await sim.stop()
  }

  @Test(
    "Send Consumption Information validates its body as Apple documents",
    arguments: [
      (#"{"customerConsented":true,"sampleContentProvided":false,"deliveryStatus":"DELIVERED"}"#, 202, nil),
      (#"{"customerConsented":false,"sampleContentProvided":false,"deliveryStatus":"DELIVERED"}"#, 400, 4_000_035),
      (#"{"customerConsented":true,"deliveryStatus":"DELIVERED"}"#, 400, 4_000_041),
      (#"{"customerConsented":true,"sampleContentProvided":true,"deliveryStatus":"LOST"}"#, 400, 4_000_036),
      (#"{"customerConsented":true,"sampleContentProvided":true,"deliveryStatus":"DELIVERED","consumptionPercentage":100001}"#, 400, 4_000_000),
      (#"{"customerConsented":true,"sampleContentProvided":true,"deliveryStatus":"DELIVERED","refundPreference":"MAYBE"}"#, 400, 4_000_000),
      (#"{"customerConsented":true,"sampleContentProvided":true,"deliveryStatus":"DELIVERED","refundPreference":"GRANT_PRORATED"}"#, 400, 4_000_000),
      (#"{"customerConsented":true,"sampleContentProvided":true,"deliveryStatus":"DELIVERED","refundPreference":"GRANT_PRORATED","consumptionPercentage":40000}"#, 202, nil),
      // GRANT_PRORATED needs a percentage above 0 and below 100000; an undelivered purchase's is 0
      // (https://developer.apple.com/documentation/appstoreserverapi/consumptionpercentage).
      (#"{"customerConsented":true,"sampleContentProvided":true,"deliveryStatus":"DELIVERED","refundPreference":"GRANT_PRORATED","consumptionPercentage":100000}"#, 400, 4_000_000),
      (#"{"customerConsented":true,"sampleContentProvided":true,"deliveryStatus":"UNDELIVERED_OTHER","consumptionPercentage":10000}"#, 400, 4_000_000),
      (#"{"customerConsented":true,"sampleContentProvided":true,"deliveryStatus":"UNDELIVERED_OTHER","consumptionPercentage":0}"#, 202, nil),
    ] as [(String, Int, Int64?)])
  func consumption(body: String, status expected: Int, code: Int64?) async throws {
    let sim = try Sim()
    let app = "/control/apps/com.example.v2"
    try await sim.ok("POST", "/control/apps", catalogWithCommitment(notificationURL: nil))
    let key = APIKey()
    try await key.register(sim)
    try await sim.ok("POST", "/control/users", #"{"user_id":"r","environment":"production"}"#)
    let coins = try #require(
      try await sim.ok("POST", "\(app)/users/r/purchase", #"{"product_id":"coins"}"#)[
        "transactions"]?[0]?["transaction_id"]?.string)
    try await sim.ok("POST", "\(app)/users/r/refund-request", #"{"transaction_id":"\#(coins)"}"#)
    let (status, json, _) = try await api(
      "PUT", sim.base, "/inApps/v2/transactions/consumption/\(coins)", token: try key.token(), body: body)
    #expect(status == expected)
    if let code { #expect(json["errorCode"] == .integer(code)) }
    let answers = try await sim.ok("GET", "/control/consumption-answers")["answers"]?.arrayValue ?? []
    #expect(answers.count == (expected == 202 ? 1 : 0))
    await sim.stop()
  }

  @Test("an auto-renewable takes no consumptionPercentage (Apple computes it)")
  func subscriptionProrated() async throws {
    let sim = try Sim()
    let app = "/control/apps/com.example.v2"
    try await sim.ok("POST", "/control/apps", catalogWithCommitment(notificationURL: nil))
    let key = APIKey()
    try await key.register(sim)
    try await sim.ok("POST", "/control/users", #"{"user_id":"s","environment":"production"}"#)
    let id = try #require(
      try await sim.ok("POST", "\(app)/users/s/purchase", #"{"product_id":"pro.monthly"}"#)[
        "transactions"]?[0]?["transaction_id"]?.string)
    let base = #""customerConsented":true,"sampleContentProvided":false,"deliveryStatus":"DELIVERED","refundPreference":"GRANT_PRORATED""#
    var (status, _, _) = try await api(
      "PUT", sim.base, "/inApps/v2/transactions/consumption/\(id)", token: try key.token(),
      body: "{\(base),\"consumptionPercentage\":50000}")
    #expect(status == 400)
    (status, _, _) = try await api(
      "PUT", sim.base, "/inApps/v2/transactions/consumption/\(id)", token: try key.token(), body: "{\(base)}")
    #expect(status == 202)
    // Whatever the preference: Apple computes an auto-renewable's percentage itself
    // (ConsumptionPercentageAutoRenewableSubscriptionError).
    (status, _, _) = try await api(
      "PUT", sim.base, "/inApps/v2/transactions/consumption/\(id)", token: try key.token(),
      body: #"{"customerConsented":true,"sampleContentProvided":false,"deliveryStatus":"DELIVERED","refundPreference":"DECLINE","consumptionPercentage":50000}"#)
    #expect(status == 400)
    await sim.stop()
  }

  @Test("an assigned subscription renews whatever the customer's billing, is filtered as ASSIGNED, and ends when unassigned")
  func assignedSubscription() async throws {
    let receiver = try startReceiver()
    let sim = try Sim()
    let app = "/control/apps/com.example.v2"
    try await sim.ok("POST", "/control/apps", catalogWithCommitment(notificationURL: receiver.url))
    let key = APIKey()
    try await key.register(sim)
    try await sim.ok("POST", "/control/users", #"{"user_id":"a","environment":"production"}"#)
    let first = try #require(
      try await sim.ok("POST", "\(app)/users/a/assign", #"{"product_id":"pro.monthly"}"#)[
        "transactions"]?[0]?["transaction_id"]?.string)
    try await sim.fails(409, "POST", "\(app)/users/a/assign", #"{"product_id":"pro.monthly"}"#)
    try await sim.ok("POST", "/control/users/a/billing-failure")
    try await sim.advance(#"{"days":31}"#)
    var signed = try await sim.ok("GET", "\(app)/users/a/signed-transactions")
    let transactions = try #require(signed["transactions"]?.arrayValue)
    #expect(transactions.count == 2)
    #expect(transactions.allSatisfy { $0["inAppOwnershipType"]?.string == "ASSIGNED" && $0["price"] == .integer(0) })
    #expect(signed["renewal_info"]?[0]?["isInBillingRetryPeriod"] == .bool(false))
    let (status, history, _) = try await api(
      "GET", sim.base, "/inApps/v2/history/\(first)?inAppOwnershipType=ASSIGNED", token: try key.token())
    #expect(status == 200)
    #expect(history["signedTransactions"]?.arrayValue?.count == 2)
    try await sim.fails(409, "POST", "\(app)/users/a/refund-request", #"{"transaction_id":"\#(first)"}"#)
    try await sim.ok("POST", "\(app)/users/a/unassign", #"{"group_id":"pro"}"#)
    try await sim.advance(#"{"days":40}"#)
    try await sim.drain()
    signed = try await sim.ok("GET", "\(app)/users/a/signed-transactions")
    #expect(signed["transactions"]?.arrayValue?.count == 2)
    let types = try receiver.notificationsV2(root: try await rootCertificate(sim)).map {
      $0.payload["notificationType"]?.string ?? ""
    }
    #expect(types == ["SUBSCRIBED", "DID_RENEW", "EXPIRED"])
    await sim.stop()
    await receiver.stop()
  }
}
