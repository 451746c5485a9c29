"""Apple's App Store Server Library (PyPI app-store-server-library) on appstore-sim's side of the
Retention Messaging API.

Usage: apple_library_retention_peer.py CONFIG.json

CONFIG: {"root_ca_path", "private_key_path", "key_id", "issuer_id", "bundle_id", "app_apple_id",
"environment" ("Production"/"Sandbox"), "signed_payloads" (the realtime requests' signedPayload),
"offer": {"product_id", "offer_id", "transaction_id"} or null}

With the library's SignedDataVerifier (trusting only the simulator's root, online checks off):
verify_and_decode_realtime_request of every signed payload, in CONFIG's environment and in the
other one (where the library must refuse it). With its PromotionalOfferV2SignatureCreator: a
promotional offer signature for "offer", made with the In-App Purchase key. Prints one JSON object:
{"requests": [decoded], "other_environment": [status names], "offer_signature": JWS or null}.
"""

import json
import sys

from appstoreserverlibrary.jws_signature_creator import PromotionalOfferV2SignatureCreator
from appstoreserverlibrary.models.Environment import Environment
from appstoreserverlibrary.signed_data_verifier import SignedDataVerifier, VerificationException
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from apple_library_common import plain


def main():
    config = json.load(open(sys.argv[1]))
    with open(config["root_ca_path"], "rb") as handle:
        root_der = x509.load_pem_x509_certificate(handle.read()).public_bytes(Encoding.DER)
    environment = Environment(config["environment"])
    other = Environment.SANDBOX if environment == Environment.PRODUCTION else Environment.PRODUCTION
    verifier = SignedDataVerifier([root_der], False, environment, config["bundle_id"], config["app_apple_id"])
    other_verifier = SignedDataVerifier([root_der], False, other, config["bundle_id"], config["app_apple_id"])
    result = {"requests": [], "other_environment": []}
    for signed in config.get("signed_payloads", []):
        decoded = plain(verifier.verify_and_decode_realtime_request(signed))
        decoded["requestIdentifier"] = str(decoded["requestIdentifier"])
        result["requests"].append(decoded)
        try:
            other_verifier.verify_and_decode_realtime_request(signed)
            result["other_environment"].append("ACCEPTED")
        except VerificationException as error:
            result["other_environment"].append(error.status.name)
    offer = config.get("offer")
    result["offer_signature"] = None
    if offer:
        with open(config["private_key_path"], "rb") as handle:
            signing_key = handle.read()
        creator = PromotionalOfferV2SignatureCreator(
            signing_key, config["key_id"], config["issuer_id"], config["bundle_id"])
        result["offer_signature"] = creator.create_signature(
            offer["product_id"], offer["offer_id"], offer.get("transaction_id"))
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
