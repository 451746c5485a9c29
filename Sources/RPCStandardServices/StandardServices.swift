import RPCCore
import Synchronization
import SubstatusWire

/// The services every gRPC user expects: `grpc.health.v1.Health` and server reflection
/// (`grpc.reflection.v1` and `v1alpha`), so `grpcurl` and `grpc_health_probe` work without the
/// `.proto` files.
///
/// ```swift
/// let health = HealthStatus()
/// StandardServices.register(in: &router, health: health)   // after registering the others
/// health.setDraining()                                        // on shutdown: NOT_SERVING
/// ```
public enum StandardServices {
  /// Registers health and reflection for the services already in `router` (call it last).
  /// - Parameters:
  ///   - router: the server's router.
  ///   - health: the serving status to report.
  ///   - files: the descriptors reflection serves (default: every file compiled into SubstatusWire).
  public static func register(in router: inout RPCRouter, health: HealthStatus, files: [ProtoFileDescriptor] = ProtoFiles.all) {
    var services = router.serviceNames
    services += [HealthService.name, ReflectionService.v1, ReflectionService.v1alpha]
    let known = Set(services)
    HealthService.register(in: &router, status: health, services: known)
    let reflection = ReflectionService(files: files, services: known.sorted())
    reflection.register(in: &router)
  }
}

/// The serving status reported by the health service.
public final class HealthStatus: Sendable {
  private let draining = Atomic<Bool>(false)

  /// A status that reports SERVING.
  public init() {}

  /// Reports NOT_SERVING from now on (graceful shutdown: load balancers stop sending new calls).
  public func setDraining() { draining.store(true, ordering: .relaxed) }

  /// Whether the server is draining.
  public var isDraining: Bool { draining.load(ordering: .relaxed) }
}

/// `grpc.health.v1.Health`: `Check` answers SERVING (or NOT_SERVING while draining) for the server
/// (`""`) and each registered service, `NOT_FOUND` for other names; `Watch` is not implemented.
enum HealthService {
  static let name = "grpc.health.v1.Health"

  static func register(in router: inout RPCRouter, status: HealthStatus, services: Set<String>) {
    router.registerUnary(
      method: Grpc_Health_V1_Health.check.path, request: Grpc_Health_V1_HealthCheckRequest.self,
      response: Grpc_Health_V1_HealthCheckResponse.self
    ) { request, _ in
      guard request.service.isEmpty || services.contains(request.service) else {
        throw RPCError(code: .notFound, message: "unknown service \(request.service)")
      }
      var response = Grpc_Health_V1_HealthCheckResponse()
      response.status = status.isDraining ? .notServing : .serving
      return response
    }
    router.registerStreaming(method: Grpc_Health_V1_Health.watch.path) { _, _, _ in
      throw RPCError(code: .unimplemented, message: "grpc.health.v1.Health/Watch is not implemented; use Check")
    }
  }
}

/// Server reflection over the embedded descriptor set. One implementation serves `v1` and
/// `v1alpha`: their messages are wire-identical.
struct ReflectionService: Sendable {
  static let v1 = "grpc.reflection.v1.ServerReflection"
  static let v1alpha = "grpc.reflection.v1alpha.ServerReflection"

  let files: [String: ProtoFileDescriptor]
  let fileBySymbol: [String: String]
  let services: [String]

  init(files: [ProtoFileDescriptor], services: [String]) {
    self.files = Dictionary(files.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
    var bySymbol: [String: String] = [:]
    for f in files { for s in f.symbols { bySymbol[s] = f.name } }
    fileBySymbol = bySymbol
    // List only services whose descriptors we can serve.
    self.services = services.filter { bySymbol[$0] != nil }
  }

  func register(in router: inout RPCRouter) {
    for service in [Self.v1, Self.v1alpha] {
      router.registerStreaming(method: "/\(service)/ServerReflectionInfo") { requests, responses, _ in
        var first = true
        for try await bytes in requests {
          let request: Grpc_Reflection_V1_ServerReflectionRequest
          do throws(WireError) { request = try Grpc_Reflection_V1_ServerReflectionRequest(serializedBytes: bytes) } catch {
            throw RPCError(code: .invalidArgument, message: "malformed reflection request: \(error.message)")
          }
          var parts: [RPCResponsePart] = []
          if first { parts.append(.metadata([:])) }
          first = false
          parts.append(.message(answer(request).serializedBytes()))
          responses.write(parts)
        }
        return first ? [.metadata([:])] : []
      }
    }
  }

  func answer(_ request: Grpc_Reflection_V1_ServerReflectionRequest) -> Grpc_Reflection_V1_ServerReflectionResponse {
    var response = Grpc_Reflection_V1_ServerReflectionResponse()
    response.validHost = request.host
    response.originalRequest = request
    switch request.messageRequest {
    case .listServices?:
      var list = Grpc_Reflection_V1_ListServiceResponse()
      list.service = services.map { var s = Grpc_Reflection_V1_ServiceResponse(); s.name = $0; return s }
      response.messageResponse = .listServicesResponse(list)
    case .fileByFilename(let name)?:
      response.messageResponse = files[name].map { .fileDescriptorResponse(withDependencies($0.name)) }
        ?? error(.notFound, "file \(name) not found")
    case .fileContainingSymbol(let symbol)?:
      response.messageResponse = file(containing: symbol).map { .fileDescriptorResponse(withDependencies($0)) }
        ?? error(.notFound, "symbol \(symbol) not found")
    case .fileContainingExtension(let ext)?:
      response.messageResponse = error(.notFound, "no extension \(ext.extensionNumber) of \(ext.containingType)")
    case .allExtensionNumbersOfType(let type)?:
      if fileBySymbol[type] != nil {
        var numbers = Grpc_Reflection_V1_ExtensionNumberResponse()
        numbers.baseTypeName = type
        response.messageResponse = .allExtensionNumbersResponse(numbers)
      } else {
        response.messageResponse = error(.notFound, "type \(type) not found")
      }
    case nil:
      response.messageResponse = error(.invalidArgument, "empty reflection request")
    }
    return response
  }

  /// The file declaring a symbol; a method (`pkg.Service.Method`) or field resolves to its parent.
  func file(containing symbol: String) -> String? {
    var name = Substring(symbol.hasPrefix(".") ? String(symbol.dropFirst()) : symbol)
    while !name.isEmpty {
      if let file = fileBySymbol[String(name)] { return file }
      guard let dot = name.lastIndex(of: ".") else { return nil }
      name = name[..<dot]
    }
    return nil
  }

  /// The file and everything it imports, transitively, the requested file first.
  func withDependencies(_ name: String) -> Grpc_Reflection_V1_FileDescriptorResponse {
    var order: [String] = []
    var seen = Set<String>()
    var stack = [name]
    while let next = stack.popLast() {
      guard seen.insert(next).inserted, let file = files[next] else { continue }
      order.append(next)
      stack.append(contentsOf: file.dependencies.reversed())
    }
    var response = Grpc_Reflection_V1_FileDescriptorResponse()
    response.fileDescriptorProto = order.compactMap { files[$0]?.serializedDescriptor }
    return response
  }

  func error(_ code: RPCError.Code, _ message: String) -> Grpc_Reflection_V1_ServerReflectionResponse.MessageResponse {
    var e = Grpc_Reflection_V1_ErrorResponse()
    e.errorCode = Int32(code.rawValue)
    e.errorMessage = message
    return .errorResponse(e)
  }
}
