import SubstatusJSON
public import SubstatusWire
import Synchronization

/// How long a call's status may be on the wire: every transport cuts `grpc-message` and
/// `grpc-status-details-bin` (and Connect's JSON error, built from the same two) to these bounds,
/// so that an error's header block always fits: at most 3 KiB of percent-encoded message and
/// 4 KiB of base64 details stay under the 8 KiB of metadata that grpcio (gRPC C core) accepts
/// without refusing the call, and far under the 64 KiB header block nghttp2 sends. README,
/// "Limits".
///
/// - The message: at most ``maxMessageBytes`` UTF-8 bytes, cut on a scalar boundary and ending
///   `… (N more bytes)`.
/// - The details (a serialized `google.rpc.Status`): at most ``maxDetailsBytes``. Past it, the
///   status's message is cut, each `google.rpc.BadRequest` field violation's texts are cut, then
///   the first violations that fit are kept and one more violation (field `…`) says how many were
///   left out; any other detail that still does not fit is dropped. The result is always a valid
///   `google.rpc.Status`.
///
/// ```swift
/// let (message, trailers) = StatusBounds.bound(message: error.message, trailers: error.metadata)
/// ```
public enum StatusBounds {
  /// The longest status message, in UTF-8 bytes before percent-encoding: 1 KiB (at most 3 KiB
  /// percent-encoded).
  public static let maxMessageBytes = 1024
  /// The longest serialized `google.rpc.Status` in `grpc-status-details-bin`: 3 KiB (4 KiB in
  /// base64).
  public static let maxDetailsBytes = 3072
  /// The longest message inside the details, once they are over ``maxDetailsBytes``.
  static let maxDetailsMessageBytes = 512
  /// The longest field path of a violation, once the details are over ``maxDetailsBytes``.
  static let maxViolationFieldBytes = 256
  /// The longest description of a violation, once the details are over ``maxDetailsBytes``.
  static let maxViolationDescriptionBytes = 512
  /// The metadata key of the details.
  public static let detailsKey = "grpc-status-details-bin"

  /// `message` cut to ``maxMessageBytes``.
  public static func message(_ message: String) -> String {
    guard message.utf8.count > maxMessageBytes else { return message }
    messagesCut.add(1, ordering: .relaxed)
    return ErrorText.truncated(message, maxBytes: maxMessageBytes)
  }

  private static let messagesCut = Atomic<Int>(0)
  private static let detailsCut = Atomic<Int>(0)

  /// How many status messages and details were cut since the process started (each once: a
  /// status already within the bounds passes unchanged and uncounted), for
  /// `substatus_status_cut_total`.
  public static var cutCounts: (messages: Int, details: Int) {
    (messagesCut.load(ordering: .relaxed), detailsCut.load(ordering: .relaxed))
  }

  /// The message cut to ``maxMessageBytes`` and the trailers with their details cut to
  /// ``maxDetailsBytes`` (``details(_:maxBytes:)``); both unchanged (and not copied) when they fit.
  ///
  /// - Parameters:
  ///   - message: The status message.
  ///   - trailers: The trailing metadata.
  public static func bound(message: String, trailers: Metadata) -> (message: String, trailers: Metadata) {
    (self.message(message), self.trailers(trailers))
  }

  /// The trailers with each `grpc-status-details-bin` value cut to ``maxDetailsBytes``.
  public static func trailers(_ trailers: Metadata) -> Metadata {
    guard
      trailers.contains(where: {
        guard $0.key == detailsKey, case .binary(let bytes) = $0.value else { return false }
        return bytes.count > maxDetailsBytes
      })
    else { return trailers }
    var bounded = Metadata()
    for element in trailers {
      if element.key == detailsKey, case .binary(let bytes) = element.value, bytes.count > maxDetailsBytes {
        // Details that do not decode cannot be cut into valid ones: they go.
        if let cut = details(bytes) { bounded.addBinary(cut, forKey: detailsKey) }
      } else {
        bounded.add(contentsOf: [element.key: element.value])
      }
    }
    return bounded
  }

  /// Serialized details cut to `maxBytes` (see ``status(_:maxBytes:)``); `nil` when they are over
  /// it and are not a `google.rpc.Status`.
  public static func details(_ bytes: [UInt8], maxBytes: Int = maxDetailsBytes) -> [UInt8]? {
    if bytes.count <= maxBytes { return bytes }
    guard let status = try? Google_Rpc_Status(serializedBytes: bytes) else { return nil }
    return Self.status(status, maxBytes: maxBytes).serializedBytes()
  }

  /// A `google.rpc.Status` whose encoding has at most `maxBytes` bytes (for any `maxBytes` of at
  /// least 256): unchanged when it fits; otherwise cut as the type's documentation says.
  ///
  /// - Parameters:
  ///   - status: The status.
  ///   - maxBytes: The most bytes of its encoding.
  public static func status(_ status: Google_Rpc_Status, maxBytes: Int = maxDetailsBytes) -> Google_Rpc_Status {
    if status.serializedBytes().count <= maxBytes { return status }
    detailsCut.add(1, ordering: .relaxed)
    var status = status
    status.message = ErrorText.truncated(status.message, maxBytes: min(maxDetailsMessageBytes, maxBytes / 4))

    // Other details go first (last first) while, with every violation out, the status would
    // take more than half the bound.
    func sizeWithoutViolations(_ status: Google_Rpc_Status) -> Int {
      var skeleton = status
      for (index, detail) in skeleton.details.enumerated() where detail.packedTypeName == Google_Rpc_BadRequest.protoMessageName {
        skeleton.details[index] = Google_Protobuf_Any(packing: Google_Rpc_BadRequest())
      }
      return skeleton.serializedBytes().count
    }
    while sizeWithoutViolations(status) > maxBytes / 2,
      let last = status.details.lastIndex(where: { $0.packedTypeName != Google_Rpc_BadRequest.protoMessageName })
    {
      status.details.remove(at: last)
    }

    // Each BadRequest's violations, their texts cut; every other detail as it is.
    var requests: [Int: [Google_Rpc_BadRequest.FieldViolation]] = [:]
    var total = 0
    for (index, detail) in status.details.enumerated() {
      guard let badRequest = try? detail.unpack(Google_Rpc_BadRequest.self) else { continue }
      requests[index] = badRequest.fieldViolations.map(cut)
      total += badRequest.fieldViolations.count
    }
    if !requests.isEmpty {
      // What is left once every violation is out and the note of the rest is in (with the
      // largest count it can hold), then as many violations as fit, first ones first.
      let note = leftOutNote(total, of: total)
      var skeleton = status
      for index in requests.keys {
        var empty = Google_Rpc_BadRequest()
        if index == requests.keys.min() { empty.fieldViolations = [note] }
        skeleton.details[index] = Google_Protobuf_Any(packing: empty)
      }
      // Each nested length prefix may grow by a few bytes as violations are added.
      var budget = maxBytes - skeleton.serializedBytes().count - 16
      var kept = 0
      var keptByIndex: [Int: [Google_Rpc_BadRequest.FieldViolation]] = [:]
      var full = false
      for index in requests.keys.sorted() where !full {
        var keep: [Google_Rpc_BadRequest.FieldViolation] = []
        for violation in requests[index]! {
          let size = violation.serializedBytes().count
          let cost = 1 + varintLength(size) + size
          if cost > budget {
            full = true
            break
          }
          budget -= cost
          keep.append(violation)
          kept += 1
        }
        keptByIndex[index] = keep
      }
      // The note of the rest ends the last BadRequest that kept a violation (the first one when
      // none did).
      let noteIndex = keptByIndex.filter { !$0.value.isEmpty }.keys.max() ?? requests.keys.min()!
      for index in requests.keys {
        var badRequest = Google_Rpc_BadRequest()
        badRequest.fieldViolations = keptByIndex[index] ?? []
        if kept < total && index == noteIndex {
          badRequest.fieldViolations.append(leftOutNote(total - kept, of: total))
        }
        status.details[index] = Google_Protobuf_Any(packing: badRequest)
      }
    }
    // Anything still over the bound: the other details go, last first, then the message.
    while status.serializedBytes().count > maxBytes, !status.details.isEmpty {
      if let last = status.details.indices.last(where: {
        status.details[$0].packedTypeName != Google_Rpc_BadRequest.protoMessageName
      }) {
        status.details.remove(at: last)
      } else {
        status.details.removeLast()
      }
    }
    if status.serializedBytes().count > maxBytes {
      status.message = ErrorText.truncated(status.message, maxBytes: maxBytes / 2)
    }
    return status
  }

  /// The violation that says how many were left out.
  static func leftOutNote(_ leftOut: Int, of total: Int) -> Google_Rpc_BadRequest.FieldViolation {
    var note = Google_Rpc_BadRequest.FieldViolation()
    note.field = "…"
    note.description = "\(leftOut) more field violations left out (\(total) in all)"
    note.reason = "VIOLATIONS_LEFT_OUT"
    return note
  }

  /// A violation with its texts cut.
  private static func cut(_ violation: Google_Rpc_BadRequest.FieldViolation) -> Google_Rpc_BadRequest.FieldViolation {
    var violation = violation
    violation.field = ErrorText.truncated(violation.field, maxBytes: maxViolationFieldBytes)
    violation.description = ErrorText.truncated(violation.description, maxBytes: maxViolationDescriptionBytes)
    violation.reason = ErrorText.truncated(violation.reason, maxBytes: 64)
    if let localized = violation.localizedMessage {
      var cut = localized
      cut.message = ErrorText.truncated(localized.message, maxBytes: maxViolationDescriptionBytes)
      cut.locale = ErrorText.truncated(localized.locale, maxBytes: 32)
      violation.localizedMessage = cut
    }
    return violation
  }

  private static func varintLength(_ value: Int) -> Int {
    var n = 1
    var v = value >> 7
    while v > 0 {
      n += 1
      v >>= 7
    }
    return n
  }
}
