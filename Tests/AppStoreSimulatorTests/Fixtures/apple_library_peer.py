"""Apple's App Store Server Library (PyPI app-store-server-library) against appstore-sim.

Usage: apple_library_peer.py CONFIG.json

CONFIG: {"base_url", "root_ca_path", "private_key_path", "key_id", "issuer_id", "bundle_id",
"app_apple_id", "environment" ("Production"/"Sandbox"), "transaction_id",
"notification_start_ms", "notification_end_ms", "signed_payloads": [V2 bodies' signedPayload]}

The library's AppStoreServerAPIClient calls the simulator's Server API (its token has no `iat`,
as Apple's libraries make it): Get Transaction History (V2, every page), Get All Subscription
Statuses, Get Transaction Info, Get Notification History (every page). Its SignedDataVerifier,
trusting only the simulator's root with online checks off, verifies every signed transaction,
renewal info and notification, from the API and from `signed_payloads`. Prints one JSON object:
what the library decoded, with each enum as the library's typed value; a value the library does
not know is printed as "UNRECOGNIZED:<raw>" so the caller can fail on it. Exits 1 with the
library's exception on stderr when a call or a verification fails.
"""

import json
import sys

from appstoreserverlibrary.api_client import GetTransactionHistoryVersion
from appstoreserverlibrary.models.NotificationHistoryRequest import NotificationHistoryRequest
from appstoreserverlibrary.models.TransactionHistoryRequest import Order, TransactionHistoryRequest

from apple_library_common import Decoder, connect, plain


def main():
    config = json.load(open(sys.argv[1]))
    verifier, client = connect(config)
    decode = Decoder(verifier)
    transaction, renewal, notification = decode.transaction, decode.renewal, decode.notification

    result = {"history": [], "statuses": [], "notification_history": []}
    anchor = config["transaction_id"]
    revision = None
    request = TransactionHistoryRequest(sort=Order.ASCENDING)
    while True:
        page = client.get_transaction_history(
            anchor, revision, request, GetTransactionHistoryVersion.V2)
        result["history"] += [transaction(signed) for signed in page.signedTransactions or []]
        revision = page.revision
        if not page.hasMore:
            break
    result["history_revision"] = revision

    statuses = client.get_all_subscription_statuses(anchor)
    for group in statuses.data or []:
        for last in group.lastTransactions or []:
            result["statuses"].append({
                "subscriptionGroupIdentifier": group.subscriptionGroupIdentifier,
                "status": plain(last)["status"],
                "originalTransactionId": last.originalTransactionId,
                "transaction": transaction(last.signedTransactionInfo),
                "renewal": renewal(last.signedRenewalInfo),
            })

    result["transaction_info"] = transaction(
        client.get_transaction_info(anchor).signedTransactionInfo)

    token = None
    history_request = NotificationHistoryRequest(
        startDate=config["notification_start_ms"], endDate=config["notification_end_ms"])
    while True:
        page = client.get_notification_history(token, history_request)
        for item in page.notificationHistory or []:
            result["notification_history"].append(notification(item.signedPayload))
        token = page.paginationToken
        if not page.hasMore:
            break

    result["notifications"] = [notification(signed) for signed in config["signed_payloads"]]
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
