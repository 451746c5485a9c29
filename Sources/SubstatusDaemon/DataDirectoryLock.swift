import Foundation
import Glibc

/// An exclusive lock on a data directory for the life of the process: `flock` on
/// `<data-dir>/substatusd.lock`, which holds the owner's process id. A second `substatusd` on the
/// same SQLite store is refused (two writers on one SQLite file would each believe they are the
/// only one); the kernel drops the lock when the process ends, however it ends.
final class DataDirectoryLock: Sendable {
  /// The exit status of a `substatusd` refused because another one holds the directory.
  static let busyExitStatus: Int32 = 3

  /// Why the lock was not taken.
  enum Failure: Error, CustomStringConvertible {
    /// Another process holds it; its process id as the lock file says, if readable.
    case held(path: String, owner: String?)
    /// The lock file cannot be opened or locked.
    case system(path: String, errno: Int32)

    var description: String {
      switch self {
      case .held(let path, let owner):
        return "another substatusd\(owner.map { " (pid \($0))" } ?? "") is using this data directory (\(path) is locked); stop it or choose another --data-dir"
      case .system(let path, let code):
        return "cannot lock \(path): \(String(cString: strerror(code)))"
      }
    }
  }

  private let fd: Int32

  /// Takes the lock of `directory`, without waiting.
  /// - Throws: ``Failure``.
  init(directory: String) throws(Failure) {
    let path = directory + "/substatusd.lock"
    let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
    guard fd >= 0 else { throw .system(path: path, errno: errno) }
    guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
      let code = errno
      var buffer = [UInt8](repeating: 0, count: 32)
      let count = read(fd, &buffer, buffer.count)
      close(fd)
      guard code == EWOULDBLOCK else { throw .system(path: path, errno: code) }
      let owner = count > 0
        ? String(decoding: buffer[0..<count], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines) : nil
      throw .held(path: path, owner: owner?.isEmpty == false ? owner : nil)
    }
    let pid = Array("\(getpid())\n".utf8)
    _ = ftruncate(fd, 0)
    _ = pwrite(fd, pid, pid.count, 0)
    self.fd = fd
  }

  deinit { close(fd) }
}
