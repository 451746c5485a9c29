import AppStoreSimulator
import Foundation
import HTTPServer
import SubstatusJSON
import Synchronization
import Testing

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// 2026-01-01T00:00:00Z, the simulated clock's start in tests.
let startMs: Int64 = 1_767_225_600_000
let dayMs: Int64 = 86_400_000

let session: URLSession = {
  let configuration = URLSessionConfiguration.ephemeral
  configuration.timeoutIntervalForRequest = 20
  return URLSession(configuration: configuration)
}()

struct CallError: Error, CustomStringConvertible {
  var description: String
}

/// POSTs/GETs JSON to `base + path`; returns the status and the parsed body.
func call(_ method: String, _ base: String, _ path: String, _ body: String? = nil) async throws -> (
  status: Int, json: JSONValue
) {
  var request = URLRequest(url: URL(string: "http://\(base)\(path)")!)
  request.httpMethod = method
  if let body {
    request.httpBody = Data(body.utf8)
    request.setValue("application/json", forHTTPHeaderField: "Content-Type")
  }
  let (data, response) = try await session.data(for: request)
  let status = (response as! HTTPURLResponse).statusCode
  // Non-JSON bodies (e.g. `/healthz`'s "ok") come back as a JSON string of the text.
  let json = data.isEmpty
    ? JSONValue.null : (try? JSONValue(parsing: Array(data))) ?? .string(String(decoding: data, as: UTF8.self))
  return (status, json)
}

/// A simulator served over real HTTP on a free port.
struct Sim {
  let simulator: AppStoreSimulator
  let server: HTTPServer
  var base: String { server.address }

  init(_ configuration: AppStoreSimulator.Configuration = .init(startMs: startMs)) throws {
    simulator = AppStoreSimulator(configuration: configuration)
    server = try HTTPServer(configuration: .init(host: "127.0.0.1", port: 0), router: simulator.router())
  }

  func stop() async {
    await server.stop(gracePeriod: .seconds(1))
    simulator.shutdown()
  }

  /// A control call that must succeed (2xx); returns the body.
  @discardableResult
  func ok(_ method: String, _ path: String, _ body: String? = nil, sourceLocation: SourceLocation = #_sourceLocation)
    async throws -> JSONValue
  {
    let (status, json) = try await call(method, base, path, body)
    guard (200..<300).contains(status) else {
      Issue.record("\(method) \(path) -> \(status) \(json.serialized())", sourceLocation: sourceLocation)
      throw CallError(description: "\(method) \(path) -> \(status)")
    }
    return json
  }

  /// A control call expected to fail with `status`; returns the error message.
  @discardableResult
  func fails(_ status: Int, _ method: String, _ path: String, _ body: String? = nil,
             sourceLocation: SourceLocation = #_sourceLocation) async throws -> String {
    let (actual, json) = try await call(method, base, path, body)
    #expect(actual == status, "\(method) \(path): \(json.serialized())", sourceLocation: sourceLocation)
    return json["error"]?["message"]?.stringValue ?? ""
  }

  func verify(_ receipt: String, password: String? = "s3cret", environment: String = "production",
              excludeOld: Bool = false) async throws -> JSONValue {
    var body: JSONObject = ["receipt-data": .string(receipt)]
    if let password { body["password"] = .string(password) }
    if excludeOld { body["exclude-old-transactions"] = .bool(true) }
    let (status, json) = try await call("POST", base, "/\(environment)/verifyReceipt", JSONValue.object(body).serialized())
    #expect(status == 200)
    return json
  }

  @discardableResult
  func advance(_ body: String) async throws -> JSONValue { try await ok("POST", "/control/clock/advance", body) }

  func drain() async throws {
    let json = try await ok("POST", "/control/notifications/drain", #"{"timeout_ms":10000}"#)
    #expect(json["drained"]?.boolValue == true)
  }

  func notifications(user: String? = nil) async throws -> [JSONValue] {
    let query = user.map { "?user_id=\($0)" } ?? ""
    return try await ok("GET", "/control/notifications\(query)")["notifications"]?.arrayValue ?? []
  }
}

/// A notification receiver: records every body and answers with scripted statuses (then 200).
func startReceiver(script: [Int] = []) throws -> RecordingReceiver { try RecordingReceiver(script: script) }

final class RecordingReceiver: Sendable {
  private let box: Box
  let server: HTTPServer

  final class Box: Sendable {
    let state: Mutex<(bodies: [JSONValue], script: [Int])>
    init(script: [Int]) { state = Mutex((bodies: [], script: script)) }
  }

  init(script: [Int]) throws {
    let box = Box(script: script)
    self.box = box
    server = try HTTPServer(configuration: .init(host: "127.0.0.1", port: 0)) { request in
      let body = (try? JSONValue(parsing: request.body)) ?? .null
      let status = box.state.withLock { state -> Int in
        state.bodies.append(body)
        return state.script.isEmpty ? 200 : state.script.removeFirst()
      }
      return .text("", status: status)
    }
  }

  var url: String { "http://\(server.address)/v1/apps/app1/apple/notifications" }
  var bodies: [JSONValue] { box.state.withLock { $0.bodies } }
  /// Forgets the bodies received so far.
  func reset() { box.state.withLock { $0.bodies.removeAll() } }
  var types: [String] { bodies.compactMap { $0["notification_type"]?.stringValue } }
  func stop() async { await server.stop(gracePeriod: .milliseconds(200)) }
}

extension JSONValue {
  /// Array element access for tests.
  subscript(index: Int) -> JSONValue? {
    guard let array = arrayValue, array.indices.contains(index) else { return nil }
    return array[index]
  }
  var string: String? { stringValue }
  var int64: Int64? { int64Value ?? stringValue.flatMap { Int64($0) } }
}

/// The catalog used by most tests: group "pro" with monthly (level 2, intro trial, promo),
/// a second monthly (level 2), yearly (level 1); weekly in group "lite"; a non-consumable.
func catalog(bundle: String = "com.example.app", graceDays: Int = 0, notificationURL: String? = nil,
             compression: Double = 1, shareable: Bool = true) -> String {
  let url = notificationURL.map { "\"\($0)\"" } ?? "null"
  return """
    {"bundle_id":"\(bundle)","apple_app_id":1234567890,"shared_secret":"s3cret",
     "grace_period_days":\(graceDays),"notification_url":\(url),"notification_retry_compression":\(compression),
     "products":[
      {"product_id":"pro.monthly","type":"auto_renewable","subscription_group_id":"pro","duration":"P1M",
       "level":2,"family_shareable":\(shareable),
       "introductory_offer":{"type":"free_trial","duration":"P1W"},
       "promotional_offers":[{"id":"comeback","type":"pay_as_you_go","periods":2}],
       "offer_codes":[{"ref_name":"SUMMER","type":"free_trial","duration":"P1M"}]},
      {"product_id":"pro.monthly.b","type":"auto_renewable","subscription_group_id":"pro","duration":"P1M","level":2,
       "family_shareable":\(shareable)},
      {"product_id":"pro.quarterly","type":"auto_renewable","subscription_group_id":"pro","duration":"P3M","level":2},
      {"product_id":"pro.yearly","type":"auto_renewable","subscription_group_id":"pro","duration":"P1Y","level":1,
       "family_shareable":\(shareable),
       "introductory_offer":{"type":"pay_up_front","duration":"P3M"}},
      {"product_id":"lite.weekly","type":"auto_renewable","subscription_group_id":"lite","duration":"P1W",
       "introductory_offer":{"type":"pay_as_you_go","periods":3}},
      {"product_id":"lifetime","type":"non_consumable"},
      {"product_id":"coins","type":"consumable"}
     ]}
    """
}
