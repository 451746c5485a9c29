// A paid app turned subscription (docs/architecture.md rule 24): those who bought the app before a
// cutoff keep what they paid for, as Apple's "Supporting business model changes by using the app
// transaction" describes
// (https://developer.apple.com/documentation/storekit/supporting-business-model-changes-by-using-the-app-transaction).
// The AppTransaction gives the date and version an Apple Account first got the app
// (`originalPurchaseDate`, `originalApplicationVersion`: the original CFBundleVersion on iOS, always
// 1.0 in the sandbox: https://developer.apple.com/documentation/appstoreserverapi/originalapplicationversion).
// Versions compare number by number, never as strings ("2" < "13").

/// A per-app policy: the named entitlement granted to users whose Apple Account got the app
/// before a cutoff.
public struct PaidAppEntitlement: Sendable, Hashable, Codable {
  /// The named entitlement granted (an `entitlementId` of the app's entitlements).
  public var entitlementId: String
  /// The cutoff.
  public var before: Cutoff

  /// What "before" compares.
  public enum Cutoff: Sendable, Hashable, Codable {
    /// The original purchase date is before this instant (ms since 1970; the first instant of
    /// the day given, UTC).
    case date(Int64)
    /// The original application version is lower, compared number by number (`1.9` < `1.10`;
    /// a missing number is 0, so `2` == `2.0`).
    case version(String)
  }

  /// Creates the policy.
  public init(entitlementId: String, before: Cutoff) {
    self.entitlementId = entitlementId
    self.before = before
  }

  /// Reads the cutoff as given on the command line or the API: `YYYY-MM-DD` is a date (UTC),
  /// anything else made of numbers and dots (`2.0`, `148`) a version; `nil` otherwise.
  public static func cutoff(parsing text: String) -> Cutoff? {
    let bytes = Array(text.utf8)
    if bytes.count == 10, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"),
      let year = Int(text.prefix(4)), let month = Int(text.dropFirst(5).prefix(2)), let day = Int(text.suffix(2)),
      (1970...9999).contains(year), (1...12).contains(month), (1...daysIn(month, year)).contains(day)
    {
      return .date(daysFromCivil(year, month, day) * 86_400_000)
    }
    guard !text.isEmpty, text.utf8.count <= 64, let parts = versionNumbers(text) else { return nil }
    return parts.isEmpty ? nil : .version(text)
  }

  /// The cutoff as it is given (`YYYY-MM-DD` or the version).
  public static func text(of cutoff: Cutoff) -> String {
    switch cutoff {
    case .version(let v): return v
    case .date(let ms):
      let (y, m, d) = civilFromDays(ms / 86_400_000)
      func two(_ n: Int) -> String { n < 10 ? "0\(n)" : "\(n)" }
      return "\(y)-\(two(m))-\(two(d))"
    }
  }

  /// Whether an Apple Account that first got the app at `originalPurchaseDate` in version
  /// `originalApplicationVersion` gets the entitlement; unknown values grant nothing.
  public func grants(originalPurchaseDate: Int64?, originalApplicationVersion: String?) -> Bool {
    switch before {
    case .date(let cutoff):
      guard let originalPurchaseDate else { return false }
      return originalPurchaseDate < cutoff
    case .version(let cutoff):
      guard let original = originalApplicationVersion.flatMap(Self.versionNumbers),
        let limit = Self.versionNumbers(cutoff), !original.isEmpty
      else { return false }
      for i in 0..<max(original.count, limit.count) {
        let (a, b) = (i < original.count ? original[i] : 0, i < limit.count ? limit[i] : 0)
        if a != b { return a < b }
      }
      return false
    }
  }

  /// `1.10.2` as [1, 10, 2]; `nil` when it is not numbers separated by dots.
  static func versionNumbers(_ text: String) -> [Int]? {
    var out: [Int] = []
    for part in text.split(separator: ".", omittingEmptySubsequences: false) {
      guard !part.isEmpty, part.count <= 9, part.utf8.allSatisfy({ (0x30...0x39).contains($0) }), let n = Int(part)
      else { return nil }
      out.append(n)
    }
    return out
  }

  private static func daysIn(_ month: Int, _ year: Int) -> Int {
    switch month {
    case 2: return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
    case 4, 6, 9, 11: return 30
    default: return 31
    }
  }

  /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
  private static func daysFromCivil(_ year: Int, _ month: Int, _ day: Int) -> Int64 {
    let y = month <= 2 ? year - 1 : year
    let era = (y >= 0 ? y : y - 399) / 400
    let yoe = y - era * 400
    let doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
    return Int64(era * 146_097 + doe - 719_468)
  }

  private static func civilFromDays(_ days: Int64) -> (Int, Int, Int) {
    let z = Int(days) + 719_468
    let era = (z >= 0 ? z : z - 146_096) / 146_097
    let doe = z - era * 146_097
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
    let mp = (5 * doy + 2) / 153
    let d = doy - (153 * mp + 2) / 5 + 1
    let m = mp + (mp < 10 ? 3 : -9)
    return (yoe + era * 400 + (m <= 2 ? 1 : 0), m, d)
  }
}
