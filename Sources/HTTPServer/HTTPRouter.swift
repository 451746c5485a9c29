/// A route handler: answers a request or throws (``HTTPError`` for a precise status, anything
/// else becomes a 500 with a generic message).
public typealias HTTPRouteHandler = @Sendable (HTTPRequest) async throws -> HTTPResponse

/// A small router: method + path pattern (`/v1/apps/{app_id}/notifications`) to a handler.
///
/// Unknown paths answer 404, a known path with another method answers 405 with `Allow`, HEAD
/// is answered by the GET route,
/// thrown ``HTTPError``s answer their status, other errors answer 500. All error bodies are JSON.
///
/// ```swift
/// var router = HTTPRouter()
/// router.add("GET", "/healthz") { _ in .text("ok") }
/// router.add("POST", "/v1/apps/{app_id}/apple/notifications") { request in
///   let appID = request.pathParameters["app_id"]!
///   ...
/// }
/// let server = try HTTPServer(configuration: .init(host: "127.0.0.1", port: 0), router: router)
/// ```
public struct HTTPRouter: Sendable {
  private struct Route: Sendable {
    var method: String
    var segments: [Segment]
    var handler: HTTPRouteHandler
  }

  private enum Segment: Sendable, Equatable {
    case literal(String)
    case parameter(String)
  }

  private var routes: [Route] = []

  /// Answers requests whose path no route matches, instead of 404 (another protocol served on
  /// the same listener, below every route).
  public var fallback: HTTPRouteHandler?

  /// Creates an empty router.
  public init() {}

  /// Adds a route. A `{name}` segment matches one non-empty path segment, available as
  /// `request.pathParameters[name]`. Earlier routes win over later ones.
  public mutating func add(
    _ method: String, _ pattern: String, handler: @escaping HTTPRouteHandler
  ) {
    let segments = Self.split(pattern).map { part -> Segment in
      if part.hasPrefix("{") && part.hasSuffix("}") && part.count > 2 {
        return .parameter(String(part.dropFirst().dropLast()))
      }
      return .literal(part)
    }
    routes.append(Route(method: method.uppercased(), segments: segments, handler: handler))
  }

  /// Answers `request`: dispatches to the matching route, or answers an error response.
  public func respond(to request: HTTPRequest) async -> HTTPResponse {
    let parts = Self.split(request.path)
    var allowed: [String] = []
    for route in routes {
      guard let parameters = Self.match(route.segments, parts) else { continue }
      let method = request.method.uppercased()
      // HEAD is answered by the GET route; libmicrohttpd sends the headers without the body.
      guard route.method == method || (method == "HEAD" && route.method == "GET") else {
        if !allowed.contains(route.method) { allowed.append(route.method) }
        continue
      }
      var routed = request
      routed.pathParameters = parameters
      do {
        return try await route.handler(routed)
      } catch let error as HTTPError {
        return error.response
      } catch {
        return HTTPResponse.error(status: 500, message: "internal error")
      }
    }
    if !allowed.isEmpty {
      return HTTPError(
        status: 405, message: "method \(request.method) not allowed for \(request.path)",
        headers: ["Allow": allowed.joined(separator: ", ")]
      ).response
    }
    if let fallback {
      do {
        return try await fallback(request)
      } catch let error as HTTPError {
        return error.response
      } catch {
        return HTTPResponse.error(status: 500, message: "internal error")
      }
    }
    return HTTPResponse.error(status: 404, message: "no route for \(request.path)")
  }

  private static func split(_ path: String) -> [String] {
    path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
  }

  private static func match(_ segments: [Segment], _ parts: [String]) -> [String: String]? {
    guard segments.count == parts.count else { return nil }
    var parameters: [String: String] = [:]
    for (segment, part) in zip(segments, parts) {
      switch segment {
      case .literal(let literal): if literal != part { return nil }
      case .parameter(let name): parameters[name] = part
      }
    }
    return parameters
  }
}
