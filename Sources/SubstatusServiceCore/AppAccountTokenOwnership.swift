// Rule 26 (docs/architecture.md "Domain rules"): with the app's policy
// `app_account_token_is_user_id`, a transaction first seen through a V2 notification or the Server
// API whose `appAccountToken` is set belongs to the app user whose id is that UUID in lower case.
// Apple's `appAccountToken` is "a UUID you create to associate a transaction with a customer
// account in your system" (https://developer.apple.com/documentation/appstoreserverapi/appaccounttoken),
// returned as given at purchase or as set later by Set App Account Token
// (https://developer.apple.com/documentation/appstoreserverapi/set-app-account-token).
import SubscriptionDomain
import SubscriptionStorage

/// Rule 26: who holds an original transaction Apple brought before any user of the app did.
package enum AppAccountTokenOwnership {
  /// Who holds the data of an original transaction that no user of the app holds yet, as Apple
  /// (a notification, the Server API) brought it: the user named by its `appAccountToken` (in
  /// lower case) under the app's policy `app_account_token_is_user_id`, otherwise the unclaimed
  /// pseudo-user (``SubscriptionStorage/PurchaseOwnership/unclaimedUserId(originalTransactionId:)``), whose data waits for a submission.
  /// A token that is not a UUID names nobody.
  package static func firstHolder(originalTransactionId: String, appAccountToken: String?, policy: EligibilityPolicy?) -> String {
    if policy?.appAccountTokenIsUserId == true, let token = appAccountToken, isUUID(token) {
      return token.lowercased()
    }
    return PurchaseOwnership.unclaimedUserId(originalTransactionId: originalTransactionId)
  }
}

/// Whether `text` is a UUID in 8-4-4-4-12 hexadecimal form (either case).
package func isUUID(_ text: String) -> Bool {
  let bytes = Array(text.utf8)
  guard bytes.count == 36 else { return false }
  for (i, b) in bytes.enumerated() {
    if i == 8 || i == 13 || i == 18 || i == 23 {
      guard b == UInt8(ascii: "-") else { return false }
    } else {
      let hex =
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(b) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(b)
        || (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(b)
      guard hex else { return false }
    }
  }
  return true
}
