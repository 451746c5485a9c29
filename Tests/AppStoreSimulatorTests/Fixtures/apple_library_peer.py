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

import enum
import json
import sys

import attr
from appstoreserverlibrary.api_client import AppStoreServerAPIClient, GetTransactionHistoryVersion
from appstoreserverlibrary.models.Environment import Environment
from appstoreserverlibrary.models.NotificationHistoryRequest import NotificationHistoryRequest
from appstoreserverlibrary.models.TransactionHistoryRequest import Order, TransactionHistoryRequest
from appstoreserverlibrary.signed_data_verifier import SignedDataVerifier
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding


def plain(decoded):
    """The library's decoded model as JSON: typed enums by value, unknown raw values flagged."""
    if decoded is None:
        return None
    out = {}
    for field in attr.fields(type(decoded)):
        meta = field.metadata.get("typeOfField")
        if meta == "raw":
            continue
        value = getattr(decoded, field.name)
        if meta == "main":
            raw = getattr(decoded, field.metadata["correspondingFieldName"])
            if value is None and raw is not None:
                out[field.name] = "UNRECOGNIZED:%s" % raw
                continue
        if isinstance(value, enum.Enum):
            value = value.value
        elif attr.has(type(value)):
            value = plain(value)
        if value is not None:
            out[field.name] = value
    return out


def main():
    config = json.load(open(sys.argv[1]))
    environment = Environment(config["environment"])
    with open(config["root_ca_path"], "rb") as handle:
        root_der = x509.load_pem_x509_certificate(handle.read()).public_bytes(Encoding.DER)
    verifier = SignedDataVerifier(
        [root_der], False, environment, config["bundle_id"], config["app_apple_id"])
    with open(config["private_key_path"], "rb") as handle:
        signing_key = handle.read()
    client = AppStoreServerAPIClient(
        signing_key, config["key_id"], config["issuer_id"], config["bundle_id"], environment)
    # The library has no base-URL option: point it at the simulator instead of Apple's host.
    client._base_url = config["base_url"]

    def transaction(signed):
        return plain(verifier.verify_and_decode_signed_transaction(signed))

    def renewal(signed):
        return plain(verifier.verify_and_decode_renewal_info(signed))

    def notification(signed):
        decoded = verifier.verify_and_decode_notification(signed)
        body = plain(decoded)
        data = decoded.data
        if data is not None:
            body["data"] = plain(data)
            if data.signedTransactionInfo:
                body["transaction"] = transaction(data.signedTransactionInfo)
            if data.signedRenewalInfo:
                body["renewal"] = renewal(data.signedRenewalInfo)
        return body

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
