"""What both peers of Apple's App Store Server Library (PyPI app-store-server-library) share:
the library's decoded models as JSON, and its verifier and API client set up against appstore-sim
from the peer's CONFIG.json (see apple_library_peer.py and apple_library_2026_peer.py).
"""

import enum

import attr
from appstoreserverlibrary.api_client import AppStoreServerAPIClient
from appstoreserverlibrary.models.Environment import Environment
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


def connect(config):
    """The library's SignedDataVerifier (trusting only the simulator's root, online checks off)
    and its AppStoreServerAPIClient pointed at the simulator."""
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
    return verifier, client


class Decoder:
    """Verifies and decodes signed data with `verifier`, as JSON (``plain``)."""

    def __init__(self, verifier):
        self.verifier = verifier

    def transaction(self, signed):
        return plain(self.verifier.verify_and_decode_signed_transaction(signed))

    def renewal(self, signed):
        return plain(self.verifier.verify_and_decode_renewal_info(signed))

    def app_transaction(self, signed):
        return plain(self.verifier.verify_and_decode_app_transaction(signed))

    def notification(self, signed):
        """The notification, with its transaction, renewal info, app data and app transaction
        decoded too."""
        decoded = self.verifier.verify_and_decode_notification(signed)
        body = plain(decoded)
        data = decoded.data
        if data is not None:
            body["data"] = plain(data)
            if data.signedTransactionInfo:
                body["transaction"] = self.transaction(data.signedTransactionInfo)
            if data.signedRenewalInfo:
                body["renewal"] = self.renewal(data.signedRenewalInfo)
        app_data = getattr(decoded, "appData", None)
        if app_data is not None:
            body["appData"] = plain(app_data)
            if app_data.signedAppTransactionInfo:
                body["app_transaction"] = self.app_transaction(app_data.signedAppTransactionInfo)
        token = getattr(decoded, "externalPurchaseToken", None)
        if token is not None:
            body["externalPurchaseToken"] = plain(token)
        return body
