"""End-to-end test of the In-App Purchase key and offer signatures of a running substatusd, over
real gRPC (grpcio). The signatures are verified independently with pyca/cryptography, using the
public key GetApp returns.

usage: offer_signing_e2e.py GRPC_ADDR OPERATOR_KEY FIXTURES_DIR PROTOS_DIR
       offer_signing_e2e.py GRPC_ADDR ADMIN_KEY APP_ID PROTOS_DIR PROMO_JSON INTRO_JSON
The first form sets up an app with a key made here and checks the RPCs; it prints
`APP app_id admin_key read_key`, then `N passed, 0 failed` and, on the last line, `SECRETS a b c`
(the API keys and the lines of the private key) so the caller can check the server's log holds
none of them. The second form verifies what `substatus offer sign-promo|sign-intro --json` printed
for that app (user `lapsed-user`, product premium.monthly, offer premium.winback; user `new-user`
with transaction id 704289572311575926).
"""
import base64, glob, hashlib, importlib, json, os, sys, tempfile, time, uuid

import grpc
import grpc_tools
from grpc_tools import protoc
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

grpc_addr, protos = sys.argv[1], sys.argv[4]
cli_mode = len(sys.argv) == 7

out = tempfile.mkdtemp()
files = sorted(os.path.relpath(p, protos) for p in glob.glob(os.path.join(protos, "**/*.proto"), recursive=True))
builtin = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
assert protoc.main(["protoc", f"-I{protos}", f"-I{builtin}", f"--python_out={out}", f"--grpc_python_out={out}", *files]) == 0
sys.path.insert(0, out)
grpc.__path__.append(os.path.join(out, "grpc"))
m = {f: importlib.import_module(f[:-6].replace("/", ".") + "_pb2") for f in files}
g = {f: importlib.import_module(f[:-6].replace("/", ".") + "_pb2_grpc") for f in files if "service" in f}
pb = type("pb", (), {})
for mod in m.values():
    for name in dir(mod):
        if not name.startswith("_"):
            setattr(pb, name, getattr(mod, name))
from google.rpc import status_pb2, error_details_pb2
from google.protobuf import json_format

channel = grpc.insecure_channel(grpc_addr)
stub = lambda name: getattr(g[f"substatus/v1/{name}.proto"], "".join(w.title() for w in name.split("_")) + "Stub")(channel)
tenants, admin, ingest, elig = (stub(n) for n in ["tenant_service", "admin_service", "ingest_service", "eligibility_service"])
secrets = []
checks = 0
BUNDLE = "com.example.signing"
ISSUER = "57246542-96fe-1a63-e053-0824d011072a"
KEY_ID = "2X9R4HXF34"


def auth(key):
    return (("authorization", "Bearer " + key),)


def check(cond, what):
    global checks
    assert cond, what
    checks += 1


def expect_error(code, fn):
    global checks
    try:
        fn()
    except grpc.RpcError as e:
        assert e.code() == code, (e.code(), e.details())
        checks += 1
        return e
    raise AssertionError(f"expected {code}")


def status_detail(error, message_type):
    details = dict(error.trailing_metadata()).get("grpc-status-details-bin")
    assert details, "no grpc-status-details-bin"
    for any_detail in status_pb2.Status.FromString(details).details:
        detail = message_type()
        if any_detail.Unpack(detail):
            return detail
    raise AssertionError(f"no {message_type.__name__} in the status details")


def b64url(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def verify_v1(public_key, signature_b64, fields):
    """Apple's V1 promotional offer signature: ECDSA P-256 SHA-256 (DER) over the U+2063-joined fields."""
    message = "\u2063".join(fields).encode()
    public_key.verify(base64.b64decode(signature_b64), message, ec.ECDSA(hashes.SHA256()))
    try:
        public_key.verify(base64.b64decode(signature_b64), message + b"x", ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return
    raise AssertionError("a changed message verified")


def verify_jws(public_key, compact):
    """A compact ES256 JWS: the raw r||s signature over `header.payload`; returns (header, claims)."""
    header_b64, payload_b64, signature_b64 = compact.split(".")
    signature = b64url(signature_b64)
    check(len(signature) == 64, "an ES256 JWS signature is 64 bytes")
    der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
    public_key.verify(der, f"{header_b64}.{payload_b64}".encode(), ec.ECDSA(hashes.SHA256()))
    try:
        public_key.verify(der, f"{header_b64}.{payload_b64}x".encode(), ec.ECDSA(hashes.SHA256()))
        raise AssertionError("a changed JWS verified")
    except InvalidSignature:
        pass
    return json.loads(b64url(header_b64)), json.loads(b64url(payload_b64))


def main(operator_key, fixtures):
    global secrets
    # A tenant, an app, its catalog, users.
    t = tenants.CreateTenant(pb.CreateTenantRequest(name="signing"), metadata=auth(operator_key))
    admin_key = t.admin_key
    secrets.append(admin_key)
    app = admin.RegisterApp(pb.RegisterAppRequest(bundle_id=BUNDLE, display_name="Signing"), metadata=auth(admin_key)).app
    put = json_format.Parse(open(os.path.join(fixtures, "catalog.json")).read(), pb.PutProductsRequest())
    put.app_id = app.app_id
    admin.PutProducts(put, metadata=auth(admin_key))
    read_key = admin.CreateApiKey(pb.CreateApiKeyRequest(role=pb.API_KEY_ROLE_READ, app_ids=[app.app_id]), metadata=auth(admin_key)).key
    secrets.append(read_key)
    now_ms = int(time.time() * 1000)
    day = 86_400_000
    lapsed = pb.Transaction(transaction_id="2000000001", original_transaction_id="2000000001", product_id="premium.monthly",
                            purchase_date_ms=now_ms - 60 * day, expires_date_ms=now_ms - 30 * day)
    ingest.ImportTransactions(pb.ImportTransactionsRequest(app_id=app.app_id, user_id="lapsed-user", transactions=[lapsed]), metadata=auth(admin_key))

    # No key yet: FAILED_PRECONDITION.
    expect_error(grpc.StatusCode.FAILED_PRECONDITION, lambda: elig.SignPromotionalOffer(pb.SignPromotionalOfferRequest(
        app_id=app.app_id, user_id="lapsed-user", product_id="premium.monthly", offer_id="premium.winback"), metadata=auth(read_key)))

    # The key: made here, independently of the server.
    private_key = ec.generate_private_key(ec.SECP256R1())
    p8 = private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    secrets += [line for line in p8.splitlines() if "-----" not in line]
    spki = private_key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    e = expect_error(grpc.StatusCode.INVALID_ARGUMENT, lambda: admin.SetInAppPurchaseKey(pb.SetInAppPurchaseKeyRequest(
        app_id=app.app_id, issuer_id=ISSUER, key_id="2x9r4hxf34", private_key_pem=p8), metadata=auth(admin_key)))
    check(any(v.field == "key_id" for v in status_detail(e, error_details_pb2.BadRequest).field_violations), "key_id named")
    set_app = admin.SetInAppPurchaseKey(pb.SetInAppPurchaseKeyRequest(
        app_id=app.app_id, issuer_id=ISSUER, key_id=KEY_ID, private_key_pem=p8), metadata=auth(admin_key)).app
    info = admin.GetApp(pb.GetAppRequest(app_id=app.app_id), metadata=auth(admin_key)).app.in_app_purchase_key
    check(info == set_app.in_app_purchase_key, "SetInAppPurchaseKey and GetApp agree")
    check(info.key_id == KEY_ID and info.issuer_id == ISSUER, info)
    check(info.public_key_fingerprint == "sha256:" + hashlib.sha256(spki).hexdigest()[:16], info.public_key_fingerprint)
    check(p8 not in str(info) and "PRIVATE" not in str(info), "the private key is never shown")
    public_key = serialization.load_pem_public_key(info.public_key_pem.encode())
    check(public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo) == spki, "public key")

    # A promotional offer for a lapsed subscriber: V1 and V2 verify.
    token = str(uuid.uuid4()).upper()
    before = int(time.time() * 1000)
    promo = elig.SignPromotionalOffer(pb.SignPromotionalOfferRequest(
        app_id=app.app_id, user_id="lapsed-user", product_id="premium.monthly", offer_id="premium.winback",
        app_account_token=token), metadata=auth(read_key))
    check(promo.reason == pb.ELIGIBILITY_REASON_LAPSED_SUBSCRIBER, promo.reason)
    check(promo.key_id == KEY_ID and str(uuid.UUID(promo.nonce)) == promo.nonce, promo.nonce)
    check(before - 5_000 <= promo.timestamp_ms <= int(time.time() * 1000) + 5_000, "timestamp is the server's now")
    verify_v1(public_key, promo.signature, [BUNDLE, KEY_ID, "premium.monthly", "premium.winback", token.lower(), promo.nonce, str(promo.timestamp_ms)])
    header, claims = verify_jws(public_key, promo.compact_jws)
    check(header == {"typ": "JWT", "alg": "ES256", "kid": KEY_ID}, header)
    check(claims["aud"] == "promotional-offer" and claims["bid"] == BUNDLE and claims["iss"] == ISSUER, claims)
    check(claims["nonce"] == promo.nonce and claims["productId"] == "premium.monthly", claims)
    check(claims["offerIdentifier"] == "premium.winback" and claims["transactionId"] == "2000000001", claims)
    check(claims["iat"] == promo.timestamp_ms // 1000, claims)

    # A given nonce is signed (lowercased); a given transaction id too.
    nonce = str(uuid.uuid4()).upper()
    promo2 = elig.SignPromotionalOffer(pb.SignPromotionalOfferRequest(
        app_id=app.app_id, user_id="lapsed-user", product_id="premium.monthly", offer_id="premium.winback",
        nonce=nonce, transaction_id="2000000999"), metadata=auth(read_key))
    check(promo2.nonce == nonce.lower(), promo2.nonce)
    verify_v1(public_key, promo2.signature, [BUNDLE, KEY_ID, "premium.monthly", "premium.winback", "", nonce.lower(), str(promo2.timestamp_ms)])
    check(verify_jws(public_key, promo2.compact_jws)[1]["transactionId"] == "2000000999", "transaction id as given")

    # An introductory offer for a new customer, with its appTransactionId.
    intro = elig.SignIntroductoryOfferEligibility(pb.SignIntroductoryOfferEligibilityRequest(
        app_id=app.app_id, user_id="new-user", product_id="premium.monthly", transaction_id="704289572311575926"), metadata=auth(read_key))
    check(intro.reason == pb.ELIGIBILITY_REASON_NEW_CUSTOMER and intro.key_id == KEY_ID, intro)
    header, claims = verify_jws(public_key, intro.compact_jws)
    check(header == {"typ": "JWT", "alg": "ES256", "kid": KEY_ID}, header)
    check(claims["aud"] == "introductory-offer-eligibility" and claims["bid"] == BUNDLE and claims["iss"] == ISSUER, claims)
    check(claims["allowIntroductoryOffer"] is True and claims["productId"] == "premium.monthly", claims)
    check(claims["transactionId"] == "704289572311575926" and claims["nonce"] == intro.nonce, claims)
    check(claims["iat"] == intro.issued_at_ms // 1000, claims)

    # Refusals: not eligible (with the reason), bad arguments naming the field.
    e = expect_error(grpc.StatusCode.FAILED_PRECONDITION, lambda: elig.SignPromotionalOffer(pb.SignPromotionalOfferRequest(
        app_id=app.app_id, user_id="new-user", product_id="premium.monthly", offer_id="premium.winback"), metadata=auth(read_key)))
    info_detail = status_detail(e, error_details_pb2.ErrorInfo)
    check(info_detail.reason == "ELIGIBILITY_REASON_NEVER_SUBSCRIBED" and info_detail.domain == "substatus.v1", info_detail)
    e = expect_error(grpc.StatusCode.FAILED_PRECONDITION, lambda: elig.SignIntroductoryOfferEligibility(pb.SignIntroductoryOfferEligibilityRequest(
        app_id=app.app_id, user_id="lapsed-user", product_id="premium.weekly"), metadata=auth(read_key)))
    check(status_detail(e, error_details_pb2.ErrorInfo).reason == "ELIGIBILITY_REASON_NO_INTRO_OFFER", "no intro offer")
    for field, request in [
        ("offer_id", pb.SignPromotionalOfferRequest(app_id=app.app_id, user_id="lapsed-user", product_id="premium.monthly", offer_id="nope")),
        ("nonce", pb.SignPromotionalOfferRequest(app_id=app.app_id, user_id="lapsed-user", product_id="premium.monthly", offer_id="premium.winback", nonce="n")),
        ("app_account_token", pb.SignPromotionalOfferRequest(app_id=app.app_id, user_id="lapsed-user", product_id="premium.monthly", offer_id="premium.winback", app_account_token="t")),
        ("product_id", pb.SignPromotionalOfferRequest(app_id=app.app_id, user_id="lapsed-user", product_id="lifetime", offer_id="premium.winback")),
    ]:
        e = expect_error(grpc.StatusCode.INVALID_ARGUMENT, lambda: elig.SignPromotionalOffer(request, metadata=auth(read_key)))
        check(any(v.field == field for v in status_detail(e, error_details_pb2.BadRequest).field_violations), field)
    e = expect_error(grpc.StatusCode.INVALID_ARGUMENT, lambda: elig.SignIntroductoryOfferEligibility(pb.SignIntroductoryOfferEligibilityRequest(
        app_id=app.app_id, user_id="new-user", product_id="premium.monthly"), metadata=auth(read_key)))
    check(any(v.field == "transaction_id" for v in status_detail(e, error_details_pb2.BadRequest).field_violations), "transaction_id")

    print(f"APP {app.app_id} {admin_key} {read_key}", flush=True)


def verify_cli(admin_key, app_id, promo_path, intro_path):
    """What the CLI printed with --json verifies with the app's public key from GetApp."""
    info = admin.GetApp(pb.GetAppRequest(app_id=app_id), metadata=auth(admin_key)).app.in_app_purchase_key
    public_key = serialization.load_pem_public_key(info.public_key_pem.encode())
    cli_promo = json_format.Parse(open(promo_path).read(), pb.SignPromotionalOfferResponse())
    check(cli_promo.reason == pb.ELIGIBILITY_REASON_LAPSED_SUBSCRIBER, cli_promo.reason)
    verify_v1(public_key, cli_promo.signature, [BUNDLE, KEY_ID, "premium.monthly", "premium.winback", "", cli_promo.nonce, str(cli_promo.timestamp_ms)])
    check(verify_jws(public_key, cli_promo.compact_jws)[1]["offerIdentifier"] == "premium.winback", "CLI promo JWS")
    cli_intro = json_format.Parse(open(intro_path).read(), pb.SignIntroductoryOfferEligibilityResponse())
    claims = verify_jws(public_key, cli_intro.compact_jws)[1]
    check(claims["transactionId"] == "704289572311575926" and claims["allowIntroductoryOffer"] is True, claims)


if cli_mode:
    verify_cli(sys.argv[2], sys.argv[3], sys.argv[5], sys.argv[6])
    print(f"{checks} passed, 0 failed")
else:
    operator_key, fixtures = sys.argv[2], sys.argv[3]
    secrets = [operator_key]
    main(operator_key, fixtures)
    print(f"{checks} passed, 0 failed")
    print("SECRETS " + " ".join(secrets))
