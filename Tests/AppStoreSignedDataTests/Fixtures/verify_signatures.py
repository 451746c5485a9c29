"""Independent checks of what AppStoreSignedData produces, with pyca/cryptography (PyPI).

Reads a JSON array of checks on stdin; prints a JSON array of results (same order). A check:
  {"kind": "jws", "publicKeyPEM": ..., "jws": ...}
      verifies an ES256 compact JWS (r||s converted to DER); result {"ok", "header", "payload"}
  {"kind": "der", "publicKeyPEM": ..., "messageB64": ..., "signatureB64": ...}
      verifies an ECDSA-SHA256 DER signature; result {"ok"}
  {"kind": "chain", "pems": [leaf, intermediate, root]}
      each certificate issued by the next (signature and issuer name), the root self-signed;
      result {"ok", "fingerprints" (SHA-256 hex, lowercase), "extensions" (dotted OIDs per cert),
      "basicConstraintsCA" (per cert)}
  {"kind": "promo_v1", "publicKeyPEM": ..., "fields": {bundleId, keyId, productId, offerId,
   appAccountToken, nonce, timestamp}, "signatureB64": ...}
      builds Apple's V1 promotional offer string itself (U+2063-joined, token and nonce lowercased)
      and verifies the DER signature; result {"ok"}
  {"kind": "sign_jws", "privateKeyPEM": ..., "header": {...}, "payload": {...}}
      signs with Python; result {"jws"}
  {"kind": "apple_like_jws", "payload": {...}, "leafMarker": bool, "intermediateMarker": bool}
      makes a root, an intermediate and a leaf with Python (P-256, the Apple marker extensions
      holding DER NULL unless turned off) and signs the payload with the leaf, header {alg, x5c};
      result {"jws", "rootPEM"}
"""
import base64
import json
import sys

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)


def b64url_decode(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def b64url_encode(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def check_jws(check):
    key = serialization.load_pem_public_key(check["publicKeyPEM"].encode())
    assert isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name == "secp256r1"
    header_b64, payload_b64, signature_b64 = check["jws"].split(".")
    signature = b64url_decode(signature_b64)
    if len(signature) != 64:
        return {"ok": False, "error": "signature length %d" % len(signature)}
    der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
    try:
        key.verify(der, (header_b64 + "." + payload_b64).encode(), ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return {"ok": False, "error": "invalid signature"}
    return {
        "ok": True,
        "header": json.loads(b64url_decode(header_b64)),
        "payload": json.loads(b64url_decode(payload_b64)),
    }


def check_der(check):
    key = serialization.load_pem_public_key(check["publicKeyPEM"].encode())
    try:
        key.verify(
            base64.b64decode(check["signatureB64"], validate=True),
            base64.b64decode(check["messageB64"], validate=True),
            ec.ECDSA(hashes.SHA256()),
        )
    except InvalidSignature:
        return {"ok": False, "error": "invalid signature"}
    return {"ok": True}


def check_chain(check):
    certs = [x509.load_pem_x509_certificate(pem.encode()) for pem in check["pems"]]
    issuers = certs[1:] + [certs[-1]]
    try:
        for cert, issuer in zip(certs, issuers):
            cert.verify_directly_issued_by(issuer)
    except (InvalidSignature, ValueError, TypeError) as error:
        return {"ok": False, "error": repr(error)}
    constraints = []
    for cert in certs:
        try:
            constraints.append(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
        except x509.ExtensionNotFound:
            constraints.append(None)
    return {
        "ok": True,
        "fingerprints": [cert.fingerprint(hashes.SHA256()).hex() for cert in certs],
        "extensions": [[ext.oid.dotted_string for ext in cert.extensions] for cert in certs],
        "basicConstraintsCA": constraints,
        "markerValues": [
            [ext.value.value.hex() for ext in cert.extensions if ext.oid.dotted_string.startswith("1.2.840.113635.")]
            for cert in certs
        ],
    }


def check_promo_v1(check):
    f = check["fields"]
    message = "\u2063".join(
        [
            f["bundleId"],
            f["keyId"],
            f["productId"],
            f["offerId"],
            f["appAccountToken"].lower(),
            f["nonce"].lower(),
            str(f["timestamp"]),
        ]
    )
    key = serialization.load_pem_public_key(check["publicKeyPEM"].encode())
    try:
        key.verify(
            base64.b64decode(check["signatureB64"], validate=True), message.encode("utf-8"), ec.ECDSA(hashes.SHA256())
        )
    except InvalidSignature:
        return {"ok": False, "error": "invalid signature"}
    return {"ok": True}


def sign_jws(check):
    key = serialization.load_pem_private_key(check["privateKeyPEM"].encode(), password=None)
    signing_input = (
        b64url_encode(json.dumps(check["header"], separators=(",", ":")).encode())
        + "."
        + b64url_encode(json.dumps(check["payload"], separators=(",", ":")).encode())
    )
    r, s = decode_dss_signature(key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
    return {"jws": signing_input + "." + b64url_encode(r.to_bytes(32, "big") + s.to_bytes(32, "big"))}


def apple_like_jws(check):
    import datetime

    from cryptography.x509.oid import NameOID

    def name(cn):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def certificate(subject, subject_key, issuer, issuer_key, ca, extensions):
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(subject))
            .issuer_name(name(issuer))
            .public_key(subject_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc))
            .not_valid_after(datetime.datetime(2040, 1, 1, tzinfo=datetime.timezone.utc))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=not ca,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=ca,
                    crl_sign=ca,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
        )
        for oid in extensions:
            builder = builder.add_extension(
                x509.UnrecognizedExtension(x509.ObjectIdentifier(oid), b"\x05\x00"), critical=False
            )
        return builder.sign(issuer_key, hashes.SHA256())

    root_key, intermediate_key, leaf_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    root = certificate("Python Root", root_key, "Python Root", root_key, True, [])
    intermediate = certificate(
        "Python WWDR",
        intermediate_key,
        "Python Root",
        root_key,
        True,
        ["1.2.840.113635.100.6.2.1"] if check.get("intermediateMarker", True) else [],
    )
    leaf = certificate(
        "Python Leaf",
        leaf_key,
        "Python WWDR",
        intermediate_key,
        False,
        ["1.2.840.113635.100.6.11.1"] if check.get("leafMarker", True) else [],
    )
    x5c = [base64.b64encode(c.public_bytes(serialization.Encoding.DER)).decode() for c in (leaf, intermediate, root)]
    signed = sign_jws(
        {
            "privateKeyPEM": leaf_key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ).decode(),
            "header": {"alg": "ES256", "x5c": x5c},
            "payload": check["payload"],
        }
    )
    return {"jws": signed["jws"], "rootPEM": root.public_bytes(serialization.Encoding.PEM).decode()}


KINDS = {
    "jws": check_jws,
    "der": check_der,
    "chain": check_chain,
    "promo_v1": check_promo_v1,
    "sign_jws": sign_jws,
    "apple_like_jws": apple_like_jws,
}

if __name__ == "__main__":
    checks = json.load(sys.stdin)
    json.dump([KINDS[check["kind"]](check) for check in checks], sys.stdout)
