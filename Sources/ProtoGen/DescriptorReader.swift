import CProtobufC
import CProtobufDescriptor

extension ProtoFileSet {
  /// Reads a serialized `google.protobuf.FileDescriptorSet`, decoding it with protobuf-c.
  ///
  /// - Parameter bytes: The output of `protoc --descriptor_set_out` (with `--include_source_info`
  ///   for comments).
  /// - Throws: ``ProtoGenError`` when the bytes are not a descriptor set.
  public init(serializedBytes bytes: [UInt8]) throws {
    guard let set = bytes.withUnsafeBufferPointer({
      google__protobuf__file_descriptor_set__unpack(nil, $0.count, $0.baseAddress)
    }) else { throw ProtoGenError("not a serialized FileDescriptorSet") }
    defer { google__protobuf__file_descriptor_set__free_unpacked(set, nil) }
    files = try buffer(set.pointee.file, set.pointee.n_file).map { try FileReader($0).read() }
  }
}

private func buffer<T>(_ p: UnsafeMutablePointer<UnsafeMutablePointer<T>?>?, _ n: Int) -> [UnsafeMutablePointer<T>] {
  guard let p else { return [] }
  return (0..<n).compactMap { p[$0] }
}

private func string(_ p: UnsafeMutablePointer<CChar>?) -> String {
  guard let p else { return "" }
  return String(cString: p)
}

/// Reads one FileDescriptorProto, resolving comments from its source info by path.
private struct FileReader {
  let file: UnsafeMutablePointer<Google__Protobuf__FileDescriptorProto>
  var comments: [[Int32]: String] = [:]

  init(_ file: UnsafeMutablePointer<Google__Protobuf__FileDescriptorProto>) {
    self.file = file
    if let info = file.pointee.source_code_info {
      for location in buffer(info.pointee.location, info.pointee.n_location) {
        let path = Array(UnsafeBufferPointer(start: location.pointee.path, count: location.pointee.n_path))
        var text = string(location.pointee.leading_comments)
        if text.isEmpty { text = string(location.pointee.trailing_comments) }
        if !text.isEmpty { comments[path] = text }
      }
    }
  }

  func read() throws -> ProtoFile {
    let f = file.pointee
    let package = string(f.package)
    let prefix = package.isEmpty ? "" : package + "."
    let messages = try buffer(f.message_type, f.n_message_type).enumerated().map {
      try message($1, prefix: prefix, path: [4, Int32($0)])
    }
    let enums = buffer(f.enum_type, f.n_enum_type).enumerated().map {
      enumeration($1, prefix: prefix, path: [5, Int32($0)])
    }
    let services = buffer(f.service, f.n_service).enumerated().map { (i, s) -> ProtoService in
      let name = string(s.pointee.name)
      let methods = buffer(s.pointee.method, s.pointee.n_method).enumerated().map { (j, m) in
        ProtoMethod(
          name: string(m.pointee.name),
          inputType: String(string(m.pointee.input_type).drop(while: { $0 == "." })),
          outputType: String(string(m.pointee.output_type).drop(while: { $0 == "." })),
          clientStreaming: m.pointee.client_streaming != 0,
          serverStreaming: m.pointee.server_streaming != 0,
          comment: comments[[6, Int32(i), 2, Int32(j)]] ?? "",
          idempotencyLevel: m.pointee.options.map {
            $0.pointee.has_idempotency_level != 0 ? Int32(bitPattern: $0.pointee.idempotency_level.rawValue) : 0
          } ?? 0,
          customVarintOptions: m.pointee.options.map { customVarints($0) } ?? [:])
      }
      return ProtoService(name: name, fullName: prefix + name, methods: methods, comment: comments[[6, Int32(i)]] ?? "")
    }
    let extensions = try buffer(f.`extension`, f.n_extension).enumerated().map { (i, e) -> ProtoExtension in
      let p = e.pointee
      let name = string(p.name)
      guard let kind = ProtoField.Kind(rawValue: Int32(bitPattern: p.type.rawValue)) else {
        throw ProtoGenError("\(prefix)\(name): unsupported extension type \(p.type.rawValue)")
      }
      return ProtoExtension(
        name: name, fullName: prefix + name, number: p.number,
        extendee: String(string(p.extendee).drop(while: { $0 == "." })), kind: kind,
        typeName: String(string(p.type_name).drop(while: { $0 == "." })),
        comment: comments[[7, Int32(i)]] ?? "")
    }
    return ProtoFile(
      name: string(f.name), package: package,
      dependencies: (0..<f.n_dependency).map { string(f.dependency[$0]) },
      messages: messages, enums: enums, services: services, extensions: extensions,
      serializedDescriptor: serializedWithoutSourceInfo())
  }

  /// The varint fields of a method's options that descriptor.proto does not declare (protobuf-c
  /// keeps them as unknown fields): custom options, by field number; the last one wins, as in a
  /// parse.
  func customVarints(_ options: UnsafeMutablePointer<Google__Protobuf__MethodOptions>) -> [Int32: UInt64] {
    var out: [Int32: UInt64] = [:]
    let base = options.pointee.base
    guard let fields = base.unknown_fields else { return out }
    for field in UnsafeBufferPointer(start: fields, count: Int(base.n_unknown_fields))
    where field.wire_type == PROTOBUF_C_WIRE_TYPE_VARINT {
      var value: UInt64 = 0
      for k in 0..<min(field.len, 10) { value |= UInt64(field.data[k] & 0x7f) << (7 * UInt64(k)) }
      out[Int32(bitPattern: field.tag)] = value
    }
    return out
  }

  func serializedWithoutSourceInfo() -> [UInt8] {
    let saved = file.pointee.source_code_info
    file.pointee.source_code_info = nil
    defer { file.pointee.source_code_info = saved }
    return file.withMemoryRebound(to: ProtobufCMessage.self, capacity: 1) { message in
      let size = protobuf_c_message_get_packed_size(message)
      var out = [UInt8](repeating: 0, count: size)
      _ = out.withUnsafeMutableBufferPointer { protobuf_c_message_pack(message, $0.baseAddress) }
      return out
    }
  }

  func message(_ m: UnsafeMutablePointer<Google__Protobuf__DescriptorProto>, prefix: String, path: [Int32]) throws -> ProtoMessage {
    let d = m.pointee
    let name = string(d.name)
    let fullName = prefix + name
    // Real oneofs only: a proto3 `optional` field's synthetic oneof generates no API.
    let fieldPointers = buffer(d.field, d.n_field)
    var synthetic = Set<Int32>()
    for f in fieldPointers where f.pointee.proto3_optional != 0 && f.pointee.has_oneof_index != 0 {
      synthetic.insert(f.pointee.oneof_index)
    }
    let allOneofs = buffer(d.oneof_decl, d.n_oneof_decl).map { string($0.pointee.name) }
    var realIndex: [Int32: Int] = [:]
    var oneofs: [String] = []
    for (i, n) in allOneofs.enumerated() where !synthetic.contains(Int32(i)) {
      realIndex[Int32(i)] = oneofs.count
      oneofs.append(n)
    }
    let fields = try fieldPointers.enumerated().map { (i, f) -> ProtoField in
      let p = f.pointee
      guard let kind = ProtoField.Kind(rawValue: Int32(bitPattern: p.type.rawValue)), kind != .group else {
        throw ProtoGenError("\(fullName).\(string(p.name)): unsupported field type \(p.type.rawValue)")
      }
      if p.proto3_optional != 0 {
        throw ProtoGenError("\(fullName).\(string(p.name)): proto3 optional is not supported")
      }
      return ProtoField(
        name: string(p.name), number: p.number, kind: kind,
        isRepeated: p.label.rawValue == GOOGLE__PROTOBUF__FIELD_DESCRIPTOR_PROTO__LABEL__LABEL_REPEATED.rawValue,
        typeName: String(string(p.type_name).drop(while: { $0 == "." })),
        jsonName: string(p.json_name),
        oneofIndex: p.has_oneof_index != 0 ? realIndex[p.oneof_index] : nil,
        comment: comments[path + [2, Int32(i)]] ?? "")
    }
    return ProtoMessage(
      name: name, fullName: fullName, fields: fields, oneofs: oneofs,
      messages: try buffer(d.nested_type, d.n_nested_type).enumerated().map {
        try message($1, prefix: fullName + ".", path: path + [3, Int32($0)])
      },
      enums: buffer(d.enum_type, d.n_enum_type).enumerated().map {
        enumeration($1, prefix: fullName + ".", path: path + [4, Int32($0)])
      },
      isMapEntry: d.options.map { $0.pointee.map_entry != 0 } ?? false,
      comment: comments[path] ?? "")
  }

  func enumeration(_ e: UnsafeMutablePointer<Google__Protobuf__EnumDescriptorProto>, prefix: String, path: [Int32]) -> ProtoEnum {
    let name = string(e.pointee.name)
    let values = buffer(e.pointee.value, e.pointee.n_value).enumerated().map { (i, v) in
      (name: string(v.pointee.name), number: v.pointee.number, comment: comments[path + [2, Int32(i)]] ?? "")
    }
    return ProtoEnum(name: name, fullName: prefix + name, values: values, comment: comments[path] ?? "")
  }
}
