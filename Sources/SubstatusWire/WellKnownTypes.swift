// The proto3 JSON forms of the well-known types the protos use: Duration ("1.5s") and Any
// ({"@type": "type.googleapis.com/NAME", ...fields}).

extension Google_Protobuf_Any {
  /// Packs a message: `type_url` is `type.googleapis.com/` plus its full name.
  public init<M: ProtobufMessage>(packing message: M) {
    self.init()
    typeURL = "type.googleapis.com/" + M.protoMessageName
    value = message.serializedBytes()
  }

  /// The full name of the packed message type: the part of `type_url` after the last `/`.
  public var packedTypeName: String {
    String(typeURL.split(separator: "/", omittingEmptySubsequences: false).last ?? "")
  }

  /// Unpacks the message when it is of type `M`, or returns `nil` for another type.
  /// - Throws: `WireError` when the bytes are not a valid `M`.
  public func unpack<M: ProtobufMessage>(_: M.Type) throws(WireError) -> M? {
    guard packedTypeName == M.protoMessageName else { return nil }
    return try M(serializedBytes: value)
  }
}

extension ProtoJSON {
  static func durationJSON(_ d: Google_Protobuf_Duration) -> JSONValue {
    // A decoded Duration may hold |nanos| >= 1e9 (invalid, but on the wire): carry it into the
    // seconds instead of trapping below.
    var d = d
    if d.nanos <= -1_000_000_000 || d.nanos >= 1_000_000_000 {
      let (carried, overflow) = d.seconds.addingReportingOverflow(Int64(d.nanos / 1_000_000_000))
      if !overflow { d.seconds = carried }
      d.nanos %= 1_000_000_000
    }
    let negative = d.seconds < 0 || d.nanos < 0
    let seconds = d.seconds.magnitude
    let nanos = UInt32(d.nanos.magnitude)
    var text = (negative ? "-" : "") + String(seconds)
    if nanos != 0 {
      var fraction = String(nanos)
      fraction = String(repeating: "0", count: 9 - fraction.count) + fraction
      if fraction.hasSuffix("000000") {
        fraction.removeLast(6)
      } else if fraction.hasSuffix("000") {
        fraction.removeLast(3)
      }
      text += "." + fraction
    }
    return .string(text + "s")
  }

  static func duration(_ value: JSONValue) throws(WireError) -> Google_Protobuf_Duration {
    let field = "google.protobuf.Duration"
    var text = Substring(try string(value, field))
    guard text.hasSuffix("s") else { throw error("a duration ends in \"s\", such as \"1.5s\"", field) }
    text.removeLast()
    let negative = text.hasPrefix("-")
    if negative { text.removeFirst() }
    let parts = text.split(separator: ".", omittingEmptySubsequences: false)
    guard (1...2).contains(parts.count), !parts[0].isEmpty, parts[0].allSatisfy(\.isASCIIDigit),
      let seconds = Int64(parts[0]), seconds <= 315_576_000_000
    else { throw error("\(ErrorText.quoted(text + "s")) is not a duration", field) }
    var nanos: Int32 = 0
    if parts.count == 2 {
      let f = parts[1]
      guard (1...9).contains(f.count), f.allSatisfy(\.isASCIIDigit) else {
        throw error("\(ErrorText.quoted(text + "s")) has an invalid fraction", field)
      }
      nanos = Int32(f + String(repeating: "0", count: 9 - f.count))!
    }
    var d = Google_Protobuf_Duration()
    d.seconds = negative ? -seconds : seconds
    d.nanos = negative ? -nanos : nanos
    return d
  }

  static func anyJSON(_ any: Google_Protobuf_Any) -> JSONValue {
    // An empty Any (no type, no value) is `{}`, as in the canonical mapping.
    if any.typeURL.isEmpty && any.value.isEmpty { return .object(JSONObject()) }
    var o = JSONObject()
    o.append("@type", .string(any.typeURL))
    guard let type = ProtoFiles.messageTypes[any.packedTypeName],
      let message = try? type.init(serializedBytes: any.value)
    else {
      // A type this build does not know: keep the bytes (not canonical, but lossless).
      if !any.value.isEmpty { o.append("value", bytes(any.value)) }
      return .object(o)
    }
    let inner = message.jsonValue()
    if case .object(let fields) = inner, !isSpecial(any.packedTypeName) {
      for m in fields { o.append(m.key, m.value) }
    } else {
      o.append("value", inner)
    }
    return .object(o)
  }

  static func any(_ value: JSONValue) throws(WireError) -> Google_Protobuf_Any {
    var fields = try object(value, "google.protobuf.Any")
    if fields.isEmpty { return Google_Protobuf_Any() }
    guard let typeURL = fields["@type"]?.stringValue else {
      throw error("missing \"@type\"", "google.protobuf.Any")
    }
    fields["@type"] = nil
    var any = Google_Protobuf_Any()
    any.typeURL = typeURL
    guard let type = ProtoFiles.messageTypes[any.packedTypeName] else {
      throw error("unknown type \(ErrorText.quoted(typeURL))", "google.protobuf.Any")
    }
    let inner: JSONValue = isSpecial(any.packedTypeName) ? (fields["value"] ?? .null) : .object(fields)
    any.value = try type.init(jsonValue: inner).serializedBytes()
    return any
  }

  private static func isSpecial(_ name: String) -> Bool {
    name == "google.protobuf.Duration" || name == "google.protobuf.Any"
  }
}

extension Character {
  fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}
