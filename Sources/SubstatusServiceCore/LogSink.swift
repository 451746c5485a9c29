import Dispatch
import Foundation
import SubstatusClock
import SubstatusJSON
import Synchronization

/// Where log lines go: one JSON object per line.
public struct LogSink: Sendable {
  private let sink: @Sendable (String) -> Void
  private let byteSink: @Sendable ([UInt8]) -> Void
  private let flusher: @Sendable () -> Void
  /// The clock whose wall reading stamps each ``info(_:_:)`` line (`ts`).
  public let clock: any ServiceClock

  /// A sink that calls `write` with each line (without the newline); `flush` writes out what the
  /// sink buffers, if it buffers; `clock` stamps the lines.
  public init(
    _ write: @escaping @Sendable (String) -> Void, flush: @escaping @Sendable () -> Void = {},
    clock: any ServiceClock = SystemClock()
  ) {
    self.init(write, bytes: { write(String(decoding: $0, as: UTF8.self)) }, flush: flush, clock: clock)
  }

  private init(
    _ write: @escaping @Sendable (String) -> Void, bytes: @escaping @Sendable ([UInt8]) -> Void,
    flush: @escaping @Sendable () -> Void, clock: any ServiceClock
  ) {
    sink = write
    byteSink = bytes
    flusher = flush
    self.clock = clock
  }

  /// The same sink, its lines stamped by `clock`.
  public func with(clock: any ServiceClock) -> LogSink { LogSink(sink, bytes: byteSink, flush: flusher, clock: clock) }

  /// Writes a JSON object as one line.
  public func write(_ value: JSONValue) { sink(value.serialized()) }

  /// Writes one line given as UTF-8 bytes (without the newline), as ``JSONLine`` builds it.
  package func write(line: [UInt8]) { byteSink(line) }

  /// Writes a message with fields.
  public func info(_ message: String, _ fields: [(String, JSONValue)] = []) {
    var o = JSONObject()
    o.append("ts", .integer(clock.wallMs))
    o.append("level", .string("info"))
    o.append("msg", .string(message))
    for (k, v) in fields { o.append(k, v) }
    write(.object(o))
  }

  /// Lines to standard error, buffered: written in batches at most 50 ms apart (one system call
  /// per batch instead of one per RPC), flushed when the buffer passes 64 KiB and by ``flush()``.
  public static let standardError: LogSink = {
    let writer = BufferedLineWriter(fd: 2)
    return LogSink(
      { writer.append($0.utf8) }, bytes: { writer.append($0) }, flush: { writer.flush() }, clock: SystemClock())
  }()

  /// Writes out anything buffered (call before the process exits).
  public func flush() { flusher() }

  /// Discards every line.
  public static let discard = LogSink { _ in }
}

/// Appends lines to a buffer and writes it to a file descriptor in batches.
// @unchecked: the timer source is configured once in init and never touched again; the buffer is
// in a Mutex.
final class BufferedLineWriter: @unchecked Sendable {
  private let fd: Int32
  private let buffer = Mutex<[UInt8]>([])
  private let timer: any DispatchSourceTimer

  package init(fd: Int32) {
    self.fd = fd
    timer = DispatchSource.makeTimerSource(queue: .global(qos: .utility))
    timer.schedule(deadline: .now() + .milliseconds(50), repeating: .milliseconds(50))
    timer.setEventHandler { [weak self] in self?.flush() }
    timer.resume()
  }

  package func append(_ line: some Collection<UInt8>) {
    let full = buffer.withLock { buffer -> Bool in
      buffer.append(contentsOf: line)
      buffer.append(0x0A)
      return buffer.count >= 64 << 10
    }
    if full { flush() }
  }

  package func flush() {
    let bytes = buffer.withLock { buffer -> [UInt8] in
      defer { buffer.removeAll(keepingCapacity: true) }
      return buffer
    }
    var offset = 0
    while offset < bytes.count {
      let n = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
      if n <= 0 { if errno == EINTR { continue } else { return } }
      offset += n
    }
  }
}
