public import RPCCore
public import SubstatusWire

/// gRPC server reflection (`grpc.reflection.v1` and `v1alpha`), answered from the descriptors
/// compiled into the binary (``ProtoFiles``), so that `grpcurl` works without `.proto` files.
///
/// ```swift
/// ReflectionService(files: ProtoFiles.all).register(into: &router)   // register it last
/// ```
public struct ReflectionService: Grpc_Reflection_V1_ServerReflection.ServiceProtocol,
  Grpc_Reflection_V1alpha_ServerReflection.ServiceProtocol
{
  private let files: [String: ProtoFileDescriptor]
  private let fileBySymbol: [String: String]
  /// The services `list_services` names: set by ``register(into:)``.
  private var services: [String] = []

  /// Creates the service over a set of file descriptors.
  /// - Parameter files: Every file to describe, with the files they import.
  public init(files: [ProtoFileDescriptor]) {
    var byName: [String: ProtoFileDescriptor] = [:]
    var bySymbol: [String: String] = [:]
    for file in files {
      byName[file.name] = file
      for symbol in file.symbols { bySymbol[symbol] = file.name }
    }
    self.files = byName
    fileBySymbol = bySymbol
  }

  enum Query {
    case fileByFilename(String)
    case fileContainingSymbol(String)
    case fileContainingExtension(String, Int32)
    case allExtensionNumbersOfType(String)
    case listServices
    case missing
  }

  enum Answer {
    case files([[UInt8]])
    case services([String])
    case extensionNumbers(String, [Int32])
    case error(RPCError.Code, String)
  }

  /// Registers both reflection versions; the service list is the router's services at this point.
  ///
  /// - Parameter router: The router; register the other services first.
  public func register(into router: inout RPCRouter) {
    var registered = self
    registered.services = Set(
      router.serviceNames + [Grpc_Reflection_V1_ServerReflection.name, Grpc_Reflection_V1alpha_ServerReflection.name]
    ).sorted()
    Grpc_Reflection_V1_ServerReflection.register(registered, in: &router)
    Grpc_Reflection_V1alpha_ServerReflection.register(registered, in: &router)
  }

  /// `grpc.reflection.v1.ServerReflection/ServerReflectionInfo`: answers each request in turn.
  ///
  /// - Parameters:
  ///   - requests: The queries.
  ///   - responses: One answer per query, in order.
  ///   - context: The call's context.
  public func serverReflectionInfo(
    _ requests: RPCMessageSequence<Grpc_Reflection_V1_ServerReflectionRequest>,
    _ responses: RPCMessageWriter<Grpc_Reflection_V1_ServerReflectionResponse>, _ context: ServerContext
  ) async throws {
    for try await request in requests {
      responses.write(Self.response(answer(Self.query(request), services: services), to: request))
    }
  }

  /// `grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo`: as v1, whose messages are
  /// v1alpha's under another package name, field for field (checked against grpcio-reflection by
  /// `scripts/check-protos --compare`), so each message converts through its binary encoding.
  ///
  /// - Parameters:
  ///   - requests: The queries.
  ///   - responses: One answer per query, in order.
  ///   - context: The call's context.
  public func serverReflectionInfo(
    _ requests: RPCMessageSequence<Grpc_Reflection_V1alpha_ServerReflectionRequest>,
    _ responses: RPCMessageWriter<Grpc_Reflection_V1alpha_ServerReflectionResponse>, _ context: ServerContext
  ) async throws {
    for try await alpha in requests {
      let request = try convert(alpha, to: Grpc_Reflection_V1_ServerReflectionRequest.self)
      let response = Self.response(answer(Self.query(request), services: services), to: request)
      responses.write(try convert(response, to: Grpc_Reflection_V1alpha_ServerReflectionResponse.self))
    }
  }

  func answer(_ query: Query, services: [String]) -> Answer {
    switch query {
    case .listServices:
      return .services(services)
    case .fileByFilename(let name):
      guard files[name] != nil else { return .error(.notFound, "file \(name) not found") }
      return .files(withDependencies(name))
    case .fileContainingSymbol(let symbol):
      var name = symbol
      // A method (`pkg.Service.Method`) or field is found through its enclosing symbol.
      while !name.isEmpty {
        if let file = fileBySymbol[name] { return .files(withDependencies(file)) }
        guard let dot = name.lastIndex(of: ".") else { break }
        name = String(name[..<dot])
      }
      return .error(.notFound, "symbol \(symbol) not found")
    case .fileContainingExtension(let type, let number):
      return .error(.notFound, "extension \(number) of \(type) not found")
    case .allExtensionNumbersOfType(let type):
      guard fileBySymbol[type] != nil else { return .error(.notFound, "type \(type) not found") }
      return .extensionNumbers(type, [])
    case .missing:
      return .error(.invalidArgument, "the reflection request names no query")
    }
  }

  /// The file's serialized descriptor first, then those of its transitive imports.
  private func withDependencies(_ name: String) -> [[UInt8]] {
    var order: [String] = []
    var seen: Set<String> = []
    func visit(_ name: String) {
      guard seen.insert(name).inserted, let file = files[name] else { return }
      order.append(name)
      for dependency in file.dependencies { visit(dependency) }
    }
    visit(name)
    return order.compactMap { files[$0]?.serializedDescriptor }
  }

  private static func query(_ request: Grpc_Reflection_V1_ServerReflectionRequest) -> Query {
    switch request.messageRequest {
    case .fileByFilename(let name): .fileByFilename(name)
    case .fileContainingSymbol(let symbol): .fileContainingSymbol(symbol)
    case .fileContainingExtension(let e): .fileContainingExtension(e.containingType, e.extensionNumber)
    case .allExtensionNumbersOfType(let type): .allExtensionNumbersOfType(type)
    case .listServices: .listServices
    case nil: .missing
    }
  }

  private static func response(
    _ answer: Answer, to request: Grpc_Reflection_V1_ServerReflectionRequest
  ) -> Grpc_Reflection_V1_ServerReflectionResponse {
    var response = Grpc_Reflection_V1_ServerReflectionResponse()
    response.validHost = request.host
    response.originalRequest = request
    switch answer {
    case .files(let files):
      var body = Grpc_Reflection_V1_FileDescriptorResponse()
      body.fileDescriptorProto = files
      response.messageResponse = .fileDescriptorResponse(body)
    case .services(let names):
      var body = Grpc_Reflection_V1_ListServiceResponse()
      body.service = names.map { name in
        var service = Grpc_Reflection_V1_ServiceResponse()
        service.name = name
        return service
      }
      response.messageResponse = .listServicesResponse(body)
    case .extensionNumbers(let type, let numbers):
      var body = Grpc_Reflection_V1_ExtensionNumberResponse()
      body.baseTypeName = type
      body.extensionNumber = numbers
      response.messageResponse = .allExtensionNumbersResponse(body)
    case .error(let code, let message):
      var body = Grpc_Reflection_V1_ErrorResponse()
      body.errorCode = Int32(code.rawValue)
      body.errorMessage = message
      response.messageResponse = .errorResponse(body)
    }
    return response
  }
}

/// The same message under the other reflection version's name.
private func convert<Message: ProtobufMessage>(_ message: some ProtobufMessage, to type: Message.Type) throws(RPCError) -> Message {
  do throws(WireError) {
    return try Message(serializedBytes: message.serializedBytes())
  } catch {
    throw RPCError(code: .internal, message: "failed to convert to \(Message.protoMessageName): \(error.message)")
  }
}
