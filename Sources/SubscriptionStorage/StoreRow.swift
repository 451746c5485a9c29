/// A result row as the SQL stores read it: columns by position. The SQLite and PostgreSQL rows
/// conform, so a row the two schemas share (the same columns in the same order, named by the
/// decoder's column list) is decoded once, beside what it decodes (``WebhookRowCoding``,
/// ``SharedSecretSealing``, ``InAppPurchaseKeySealing``); the dialect files keep the SQL and the
/// binding of values.
public protocol StoreRow {
  /// The column's text (empty for NULL).
  func text(_ column: Int) -> String
  /// The column's text, `nil` for NULL.
  func optionalText(_ column: Int) -> String?
  /// The column's integer (0 for NULL).
  func int(_ column: Int) -> Int64
  /// The column's integer, `nil` for NULL.
  func optionalInt(_ column: Int) -> Int64?
  /// The column's bytes (a BLOB or BYTEA; empty for NULL).
  func bytes(_ column: Int) -> [UInt8]
}
