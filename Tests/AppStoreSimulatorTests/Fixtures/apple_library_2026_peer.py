"""Apple's App Store Server Library (PyPI app-store-server-library) against what appstore-sim
models of App Store Server API 1.16-1.22 and Notifications 2.15-2.21.

Usage: apple_library_2026_peer.py CONFIG.json

CONFIG: {"base_url", "root_ca_path", "private_key_path", "key_id", "issuer_id", "bundle_id",
"app_apple_id", "environment" ("Production"/"Sandbox"), "app_transaction_id",
"signed_app_transaction" (what the device hands the app), "signed_payloads" (V2 bodies'
signedPayload), "set_app_account_token": {"original_transaction_id", "token"} or null,
"consumption": [{"transaction_id", "body"}], "rate_limit_calls": N, "only_rate_limit": bool}

With the library's AppStoreServerAPIClient: Get Transaction History (V2) by the appTransactionId
(API 1.20), Get App Transaction Info (1.17), Set App Account Token (1.16), Send Consumption
Information (V2, 1.19; each body as the library's ConsumptionRequest), then N Get Transaction Info
calls to reach the rate limit. With its SignedDataVerifier (trusting only the simulator's root):
every signed transaction, renewal info, app transaction and notification (incl. appData and
externalPurchaseToken payloads). Prints one JSON object of what the library decoded, each enum as
the library's typed value, a value it does not know as "UNRECOGNIZED:<raw>", each API error as
{"http": status, "api_error": raw code}.
"""

import json
import sys

from appstoreserverlibrary.api_client import APIException, GetTransactionHistoryVersion
from appstoreserverlibrary.models.ConsumptionRequest import ConsumptionRequest
from appstoreserverlibrary.models.DeliveryStatus import DeliveryStatus
from appstoreserverlibrary.models.RefundPreference import RefundPreference
from appstoreserverlibrary.models.TransactionHistoryRequest import Order, TransactionHistoryRequest
from appstoreserverlibrary.models.UpdateAppAccountTokenRequest import UpdateAppAccountTokenRequest

from apple_library_common import Decoder, connect, plain


def api_error(error):
    return {"http": error.http_status_code, "api_error": error.raw_api_error}


def main():
    config = json.load(open(sys.argv[1]))
    verifier, client = connect(config)
    decode = Decoder(verifier)
    transaction, renewal, notification = decode.transaction, decode.renewal, decode.notification
    app_transaction = decode.app_transaction

    result = {}
    anchor = config["app_transaction_id"]
    if config.get("only_rate_limit"):
        result["rate_limit_calls"] = rate_limit_calls(client, anchor, config["rate_limit_calls"])
        json.dump(result, sys.stdout)
        return
    history = []
    revision = None
    while True:
        page = client.get_transaction_history(
            anchor, revision, TransactionHistoryRequest(sort=Order.ASCENDING),
            GetTransactionHistoryVersion.V2)
        history += [transaction(signed) for signed in page.signedTransactions or []]
        revision = page.revision
        if not page.hasMore:
            break
    result["history"] = history
    result["app_transaction_info"] = app_transaction(
        client.get_app_transaction_info(anchor).signedAppTransactionInfo)
    if config.get("signed_app_transaction"):
        result["device_app_transaction"] = app_transaction(config["signed_app_transaction"])

    token = config.get("set_app_account_token")
    if token:
        try:
            client.set_app_account_token(
                token["original_transaction_id"], UpdateAppAccountTokenRequest(appAccountToken=token["token"]))
            result["set_app_account_token"] = "ok"
        except APIException as error:
            result["set_app_account_token"] = api_error(error)
        result["after_token"] = transaction(
            client.get_transaction_info(token["original_transaction_id"]).signedTransactionInfo)

    answers = []
    for item in config.get("consumption", []):
        body = item["body"]
        request = ConsumptionRequest(
            customerConsented=body["customerConsented"],
            sampleContentProvided=body["sampleContentProvided"],
            deliveryStatus=DeliveryStatus(body["deliveryStatus"]),
            consumptionPercentage=body.get("consumptionPercentage"),
            refundPreference=RefundPreference(body["refundPreference"]) if body.get("refundPreference") else None)
        try:
            client.send_consumption_information(item["transaction_id"], request)
            answers.append("accepted")
        except APIException as error:
            answers.append(api_error(error))
    result["consumption"] = answers

    result["notifications"] = [notification(signed) for signed in config.get("signed_payloads", [])]

    result["rate_limit_calls"] = rate_limit_calls(client, anchor, config.get("rate_limit_calls", 0))
    json.dump(result, sys.stdout)


def rate_limit_calls(client, anchor, count):
    """`count` Get App Transaction Info calls: "ok" or the API error of each."""
    outcomes = []
    for _ in range(count):
        try:
            client.get_app_transaction_info(anchor)
            outcomes.append("ok")
        except APIException as error:
            outcomes.append(api_error(error))
    return outcomes


if __name__ == "__main__":
    main()
