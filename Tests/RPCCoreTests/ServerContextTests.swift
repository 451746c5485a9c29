import RPCCore
import Synchronization
import Testing

private enum NameKey: ServerContextKey { typealias Value = String }
private enum CountKey: ServerContextKey { typealias Value = Int }

/// Collects what a call writes.
private final class CollectingWriter: RPCResponseWriter {
  let parts = Mutex<[RPCResponsePart]>([])
  func write(_ parts: [RPCResponsePart]) { self.parts.withLock { $0 += parts } }
}

/// Attaches its number under `CountKey` (adding to what an outer one attached) and a name.
private struct CountingInterceptor: ServerInterceptor {
  let number: Int
  func intercept(_ context: ServerContext, next: (ServerContext) async throws -> Void) async throws {
    var context = context
    context[CountKey.self] = (context[CountKey.self] ?? 0) * 10 + number
    context[NameKey.self] = "interceptor \(number)"
    try await next(context)
  }
}

/// A context is a value whose fields live in one shared object: copies keep their own attached
/// values, and all copies of a call share its response metadata.
@Suite struct ServerContextTests {
  @Test func copiesKeepTheirOwnValuesAndShareTheResponse() {
    let original = ServerContext(method: "/a.B/C", metadata: ["x-k": "v"], deadline: nil, peer: "p", codec: .json)
    var copy = original
    copy[NameKey.self] = "set on the copy"
    #expect(original[NameKey.self] == nil)
    #expect(copy[NameKey.self] == "set on the copy")
    #expect(copy.method == "/a.B/C" && copy.peer == "p" && copy.codec == .json && copy.service == "a.B")
    #expect(copy.metadata.firstString(forKey: "x-k") == "v")
    var again = copy
    again[NameKey.self] = "again"
    again[CountKey.self] = 1
    #expect(copy[NameKey.self] == "set on the copy" && copy[CountKey.self] == nil)
    again.response.addTrailing("t", forKey: "x-t")
    #expect(original.responseTrailing.firstString(forKey: "x-t") == "t")
    #expect(original.response === copy.response && copy.response === again.response)
  }

  @Test func responseMetadataIsMadeOnFirstUseOrGiven() {
    let context = ServerContext(method: "/a.B/C", metadata: [:], deadline: nil, peer: "p")
    #expect(context.responseInitial.isEmpty && context.responseTrailing.isEmpty)
    context.response.addInitial("1", forKey: "x-i")
    #expect(context.responseInitial.firstString(forKey: "x-i") == "1")
    #expect(context.response === context.response)
    let given = ResponseMetadata()
    #expect(ServerContext(method: "/a.B/C", metadata: [:], deadline: nil, peer: "p", response: given).response === given)
  }

  /// Through the server with 0-3 interceptors: the handler sees what they attached, and the
  /// metadata it sets on its copy reaches the reply and the status.
  @Test(arguments: [0, 1, 2, 3])
  func interceptorsValuesReachTheHandlerAndItsMetadataTheReply(interceptors: Int) async throws {
    var router = RPCRouter()
    router.registerUnaryBytes(method: "/a.B/C") { request, context in
      context.response.addInitial(context[NameKey.self] ?? "none", forKey: "x-name")
      context.response.addTrailing(String(context[CountKey.self] ?? 0), forKey: "x-count")
      return request
    }
    let writer = CollectingWriter()
    let context = ServerContext(method: "/a.B/C", metadata: [:], deadline: nil, peer: "p")
    await RPCServer.handle(
      RPCServerCall(context: context, requests: RPCRequestStream(messages: [[1, 2]]), responses: writer), router: router,
      interceptors: (0..<interceptors).map { CountingInterceptor(number: $0 + 1) })
    let parts = writer.parts.withLock { $0 }
    guard parts.count == 3, case .metadata(let initial) = parts[0], case .message(let message) = parts[1],
      case .status(let code, _, let trailers) = parts[2]
    else {
      Issue.record("unexpected parts \(parts)")
      return
    }
    #expect(message == [1, 2] && code == .ok)
    #expect(initial.firstString(forKey: "x-name") == (interceptors == 0 ? "none" : "interceptor \(interceptors)"))
    #expect(trailers.firstString(forKey: "x-count") == ["0", "1", "12", "123"][interceptors])
    #expect(context[NameKey.self] == nil)
  }
}
