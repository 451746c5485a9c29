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

import enum
import json
import sys

import attr
from appstoreserverlibrary.api_client import APIException, AppStoreServerAPIClient, GetTransactionHistoryVersion
from appstoreserverlibrary.models.ConsumptionRequest import ConsumptionRequest
from appstoreserverlibrary.models.DeliveryStatus import DeliveryStatus
from appstoreserverlibrary.models.Environment import Environment
from appstoreserverlibrary.models.RefundPreference import RefundPreference
from appstoreserverlibrary.models.TransactionHistoryRequest import Order, TransactionHistoryRequest
from appstoreserverlibrary.models.UpdateAppAccountTokenRequest import UpdateAppAccountTokenRequest
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


def api_error(error):
    return {"http": error.http_status_code, "api_error": error.raw_api_error}


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
    client._base_url = config["base_url"]

    def transaction(signed):
        return plain(verifier.verify_and_decode_signed_transaction(signed))

    def renewal(signed):
        return plain(verifier.verify_and_decode_renewal_info(signed))

    def app_transaction(signed):
        return plain(verifier.verify_and_decode_app_transaction(signed))

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
        if decoded.appData is not None:
            body["appData"] = plain(decoded.appData)
            if decoded.appData.signedAppTransactionInfo:
                body["app_transaction"] = app_transaction(decoded.appData.signedAppTransactionInfo)
        if decoded.externalPurchaseToken is not None:
            body["externalPurchaseToken"] = plain(decoded.externalPurchaseToken)
        return body

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
