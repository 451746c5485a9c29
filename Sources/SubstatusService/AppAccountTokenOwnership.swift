// Rule 26 (docs/architecture.md "Domain rules"): with the app's policy
// `app_account_token_is_user_id`, a transaction first seen through a V2 notification or the Server
// API whose `appAccountToken` is set belongs to the app user whose id is that UUID in lower case.
// Apple's `appAccountToken` is "a UUID you create to associate a transaction with a customer
// account in your system" (https://developer.apple.com/documentation/appstoreserverapi/appaccounttoken),
// returned as given at purchase or as set later by Set App Account Token
// (https://developer.apple.com/documentation/appstoreserverapi/set-app-account-token).
import SubscriptionDomain
import SubscriptionStorage

extension SubstatusService {
  /// Who holds the data of an original transaction that no user of the app holds yet, as Apple
  /// (a notification, the Server API) brought it: the user named by its `appAccountToken` (in
  /// lower case) under the app's policy `app_account_token_is_user_id`, otherwise the unclaimed
  /// pseudo-user (``unclaimedUserID(originalTransactionId:)``), whose data waits for a submission.
  /// A token that is not a UUID names nobody.
  static func firstHolder(originalTransactionId: String, appAccountToken: String?, policy: EligibilityPolicy?) -> String {
    if policy?.appAccountTokenIsUserId == true, let token = appAccountToken, InAppPurchaseKeyValidation.isUUID(token) {
      return token.lowercased()
    }
    return unclaimedUserID(originalTransactionId: originalTransactionId)
  }
}
