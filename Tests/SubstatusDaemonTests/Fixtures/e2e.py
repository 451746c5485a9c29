"""End-to-end test of a running substatusd over real gRPC (grpcio) and HTTP.

usage: e2e.py GRPC_ADDR HTTP_ADDR OPERATOR_KEY FIXTURES_DIR PROTOS_DIR
Prints every secret it saw on the last line as `SECRETS a b c` so the caller can grep the logs.
"""
import copy, glob, importlib, json, os, sys, tempfile, urllib.error, urllib.request

import grpc
import grpc_tools
from grpc_tools import protoc

grpc_addr, http_addr, operator_key, fixtures, protos = sys.argv[1:6]

# Stubs from the repository's own .proto files.
out = tempfile.mkdtemp()
files = sorted(os.path.relpath(p, protos) for p in glob.glob(os.path.join(protos, "**/*.proto"), recursive=True))
builtin = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
assert protoc.main(["protoc", f"-I{protos}", f"-I{builtin}", f"--python_out={out}", f"--grpc_python_out={out}", *files]) == 0
sys.path.insert(0, out)
grpc.__path__.append(os.path.join(out, "grpc"))
m = {f: importlib.import_module(f[:-6].replace("/", ".") + "_pb2") for f in files}
g = {f: importlib.import_module(f[:-6].replace("/", ".") + "_pb2_grpc") for f in files if "service" in f or "health" in f or "reflection" in f}
pb = type("pb", (), {})
for f, mod in m.items():
    for name in dir(mod):
        if not name.startswith("_"):
            setattr(pb, name, getattr(mod, name))
from google.rpc import status_pb2, error_details_pb2
from grpc.health.v1 import health_pb2, health_pb2_grpc
from grpc.reflection.v1alpha import reflection_pb2 as refl_alpha, reflection_pb2_grpc as refl_alpha_grpc
from grpc.reflection.v1 import reflection_pb2 as refl_v1, reflection_pb2_grpc as refl_v1_grpc
from google.protobuf import descriptor_pb2

channel = grpc.insecure_channel(grpc_addr)
stub = lambda name: getattr(g[f"substatus/v1/{name}.proto"], "".join(w.title() for w in name.split("_")) + "Stub")(channel)
tenants, admin, ingest, elig, status, report = (stub(n) for n in ["tenant_service", "admin_service", "ingest_service", "eligibility_service", "status_service", "report_service"])
secrets = [operator_key]
checks = 0

def auth(key):
    return (("authorization", "Bearer " + key),)

def expect_error(code, fn, field=None):
    global checks
    try:
        fn()
    except grpc.RpcError as e:
        assert e.code() == code, (e.code(), e.details())
        if field:
            assert field in e.details(), e.details()
            details = dict(e.trailing_metadata()).get("grpc-status-details-bin")
            assert details, "no grpc-status-details-bin"
            st = status_pb2.Status.FromString(details)
            br = error_details_pb2.BadRequest()
            assert st.details[0].Unpack(br), st
            assert any(field in v.field for v in br.field_violations), br
        checks += 1
        return e
    raise AssertionError(f"expected {code}")

def check(cond, what):
    global checks
    assert cond, what
    checks += 1

# Health and reflection (no key needed).
h = health_pb2_grpc.HealthStub(channel)
check(h.Check(health_pb2.HealthCheckRequest()).status == health_pb2.HealthCheckResponse.SERVING, "health")
check(h.Check(health_pb2.HealthCheckRequest(service="substatus.v1.EligibilityService")).status == health_pb2.HealthCheckResponse.SERVING, "health svc")
expect_error(grpc.StatusCode.NOT_FOUND, lambda: h.Check(health_pb2.HealthCheckRequest(service="nope.Svc")))
for mod, mod_grpc in [(refl_alpha, refl_alpha_grpc), (refl_v1, refl_v1_grpc)]:
    rs = mod_grpc.ServerReflectionStub(channel)
    reqs = [mod.ServerReflectionRequest(list_services=""), mod.ServerReflectionRequest(file_containing_symbol="substatus.v1.EligibilityService.CheckEligibility")]
    answers = list(rs.ServerReflectionInfo(iter(reqs)))
    names = {s.name for s in answers[0].list_services_response.service}
    check({"substatus.v1.EligibilityService", "substatus.v1.AdminService", "grpc.health.v1.Health"} <= names, names)
    fds = [descriptor_pb2.FileDescriptorProto.FromString(b) for b in answers[1].file_descriptor_response.file_descriptor_proto]
    check(fds[0].name == "substatus/v1/eligibility_service.proto" and "substatus/v1/common.proto" in {f.name for f in fds}, [f.name for f in fds])

# The admin flow.
t = tenants.CreateTenant(pb.CreateTenantRequest(name="acme"), metadata=auth(operator_key))
admin_key = t.admin_key
secrets.append(admin_key)
app = admin.RegisterApp(pb.RegisterAppRequest(bundle_id="com.example.app", display_name="Example"), metadata=auth(admin_key)).app
expect_error(grpc.StatusCode.ALREADY_EXISTS, lambda: admin.RegisterApp(pb.RegisterAppRequest(bundle_id="com.example.app"), metadata=auth(admin_key)))
secret1 = "0123456789abcdef0123456789abcdef"
secrets.append(secret1)
fp = admin.SetSharedSecret(pb.SetSharedSecretRequest(app_id=app.app_id, shared_secret=secret1), metadata=auth(admin_key)).fingerprint
check(fp and secret1 not in fp, "fingerprint")
from google.protobuf import json_format
put = json_format.Parse(open(os.path.join(fixtures, "catalog.json")).read(), pb.PutProductsRequest())
put.app_id = app.app_id
admin.PutProducts(put, metadata=auth(admin_key))
listed = admin.ListProducts(pb.ListProductsRequest(app_id=app.app_id, page_size=3), metadata=auth(admin_key))
check(len(listed.products) == 3 and listed.next_page_token, "products page")
read_key = admin.CreateApiKey(pb.CreateApiKeyRequest(role=pb.API_KEY_ROLE_READ, app_ids=[app.app_id]), metadata=auth(admin_key)).key
secrets.append(read_key)
body = open(os.path.join(fixtures, "verify_receipt_multi_group.json"), "rb").read()
imp = ingest.ImportReceiptResponse(pb.ImportReceiptResponseRequest(app_id=app.app_id, user_id="user-1", verify_receipt_response_json=body), metadata=auth(admin_key))
check(imp.transaction_count > 0, "import")
answer = elig.CheckEligibility(pb.CheckEligibilityRequest(app_id=app.app_id, as_of_ms=1711324800000, queries=[
    pb.EligibilityQuery(user_id="user-1", product_ids=["premium.monthly", "pro.monthly", "nope"]),
    pb.EligibilityQuery(user_id="new-user", product_ids=["premium.monthly"])]), metadata=auth(read_key))
check([u.user_id for u in answer.users] == ["user-1", "new-user"], "order")
check(answer.users[0].products[2].introductory.reason == pb.ELIGIBILITY_REASON_UNKNOWN_PRODUCT, "unknown product")
check(answer.users[0].products[0].introductory.eligible is False, "premium intro used")
check(answer.users[0].products[1].promotional.eligible is True, "pro promo")
check(answer.users[1].products[0].introductory.reason == pb.ELIGIBILITY_REASON_NEW_CUSTOMER, "new customer")
st = status.GetStatus(pb.GetStatusRequest(app_id=app.app_id, user_id="user-1", as_of_ms=1711324800000), metadata=auth(read_key))
groups = {g.subscription_group_id: g for g in st.groups}
check(groups["20001001"].state == pb.SUBSCRIPTION_STATE_ACTIVE and groups["20001001"].product_id == "premium.yearly", groups)
check(groups["20002002"].state == pb.SUBSCRIPTION_STATE_REVOKED, groups)
check(any(e.product_id == "lifetime" for e in st.entitlements), "lifetime")
hist = status.GetTransactionHistory(pb.GetTransactionHistoryRequest(app_id=app.app_id, user_id="user-1"), metadata=auth(read_key))
check(len(hist.transactions) == imp.transaction_count, "history")
rep = report.GetReport(pb.GetReportRequest(app_id=app.app_id, as_of_ms=1711324800000), metadata=auth(admin_key)).report
check(rep.users == 1 and rep.active >= 1, rep)

# Bad input answers INVALID_ARGUMENT naming the field; the server keeps serving.
expect_error(grpc.StatusCode.INVALID_ARGUMENT, lambda: elig.CheckEligibility(pb.CheckEligibilityRequest(app_id=app.app_id), metadata=auth(read_key)), "queries")
e = expect_error(grpc.StatusCode.RESOURCE_EXHAUSTED, lambda: elig.CheckEligibility(pb.CheckEligibilityRequest(app_id=app.app_id, queries=[pb.EligibilityQuery(user_id="u", product_ids=["p"])] * 1001), metadata=auth(read_key)))
check(e.details() == "queries: at most 1000 per call, got 1001", e.details())
expect_error(grpc.StatusCode.INVALID_ARGUMENT, lambda: elig.CheckEligibility(pb.CheckEligibilityRequest(app_id=app.app_id, environment=99, queries=[pb.EligibilityQuery(user_id="u")]), metadata=auth(read_key)), "environment")
expect_error(grpc.StatusCode.INVALID_ARGUMENT, lambda: status.GetStatus(pb.GetStatusRequest(app_id=app.app_id, user_id=""), metadata=auth(read_key)), "user_id")
expect_error(grpc.StatusCode.INVALID_ARGUMENT, lambda: status.GetStatus(pb.GetStatusRequest(app_id=app.app_id, user_id="x" * 300), metadata=auth(read_key)), "user_id")
expect_error(grpc.StatusCode.INVALID_ARGUMENT, lambda: ingest.ImportReceiptResponse(pb.ImportReceiptResponseRequest(app_id=app.app_id, user_id="u", verify_receipt_response_json=b"{not json"), metadata=auth(admin_key)), "verify_receipt_response_json")
expect_error(grpc.StatusCode.INVALID_ARGUMENT, lambda: admin.PutProducts(pb.PutProductsRequest(app_id=app.app_id, products=[pb.Product(product_id="x", type=77)]), metadata=auth(admin_key)), "products[0].type")
expect_error(grpc.StatusCode.NOT_FOUND, lambda: status.GetStatus(pb.GetStatusRequest(app_id="app_nope", user_id="u"), metadata=auth(admin_key)))
expect_error(grpc.StatusCode.UNAUTHENTICATED, lambda: status.GetStatus(pb.GetStatusRequest(app_id=app.app_id, user_id="u")))
expect_error(grpc.StatusCode.PERMISSION_DENIED, lambda: admin.ListApps(pb.ListAppsRequest(), metadata=auth(read_key)))
check(h.Check(health_pb2.HealthCheckRequest()).status == health_pb2.HealthCheckResponse.SERVING, "still serving")

# V1 notifications over HTTP.
def notify(body, expect=200):
    global checks
    req = urllib.request.Request(f"http://{http_addr}/v1/apps/{app.app_id}/apple/notifications", data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            code, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        code, text = e.code, e.read().decode()
    assert code == expect, (code, text)
    checks += 1
    return json.loads(text) if text else None

def txn(tid, otid, product, purchase, expires, group, **extra):
    d = {"quantity": "1", "product_id": product, "transaction_id": tid, "original_transaction_id": otid,
         "purchase_date_ms": str(purchase), "expires_date_ms": str(expires), "is_trial_period": "false",
         "is_in_intro_offer_period": "false", "subscription_group_identifier": group, "in_app_ownership_type": "PURCHASED"}
    d.update(extra)
    return d

def notification(kind, password, infos, renew):
    return {"notification_type": kind, "password": password, "environment": "PROD", "auto_renew_status": "true",
            "unified_receipt": {"status": 0, "environment": "Production", "latest_receipt": "eA==",
                                "latest_receipt_info": infos, "pending_renewal_info": renew}}

DAY = 86400000
T0 = 1711324800000
renew = [{"auto_renew_product_id": "pro.monthly", "product_id": "pro.monthly", "original_transaction_id": "9000", "auto_renew_status": "1"}]
first = txn("9000", "9000", "pro.monthly", T0 - 40 * DAY, T0 - 10 * DAY, "20002002")
second = txn("9001", "9000", "pro.monthly", T0 - 10 * DAY, T0 + 20 * DAY, "20002002")
refunded = dict(second, cancellation_date_ms=str(T0 - 5 * DAY), cancellation_reason="0")
renewed = notification("DID_RENEW", secret1, [first, second], renew)
refund = notification("REFUND", secret1, [first, refunded], renew)
# The user is known by the first purchase.
ingest.ImportTransactions(pb.ImportTransactionsRequest(app_id=app.app_id, user_id="in-order", transactions=[pb.Transaction(transaction_id="9000", original_transaction_id="9000", product_id="pro.monthly", purchase_date_ms=T0 - 40 * DAY, expires_date_ms=T0 - 10 * DAY)]), metadata=auth(admin_key))
check(notify(renewed)["status"] == "applied", "renewed")
check(notify(renewed)["status"] == "duplicate", "duplicate applied once")
check(notify(refund)["status"] == "applied", "refund")
notify(notification("DID_RENEW", "wrong-secret", [first], renew), expect=401)
notify({"signedPayload": "x.y.z"}, expect=400)  # V2: not a JWS (MALFORMED)
notify({"nonsense": True}, expect=400)

# Out of order, for a second original transaction of another user: same final state.
def shifted(d, otid_map):
    d = copy.deepcopy(d)
    for info in d["unified_receipt"]["latest_receipt_info"] + d["unified_receipt"]["pending_renewal_info"]:
        info["original_transaction_id"] = otid_map[info["original_transaction_id"]]
        if "transaction_id" in info:
            info["transaction_id"] = otid_map.get(info["transaction_id"], info["transaction_id"] + "b")
    return d
ids = {"9000": "9100", "9001": "9101"}
ingest.ImportTransactions(pb.ImportTransactionsRequest(app_id=app.app_id, user_id="out-of-order", transactions=[pb.Transaction(transaction_id="9100", original_transaction_id="9100", product_id="pro.monthly", purchase_date_ms=T0 - 40 * DAY, expires_date_ms=T0 - 10 * DAY)]), metadata=auth(admin_key))
notify(shifted(refund, ids))
notify(shifted(renewed, ids))
a = status.GetStatus(pb.GetStatusRequest(app_id=app.app_id, user_id="in-order", as_of_ms=T0), metadata=auth(read_key))
b = status.GetStatus(pb.GetStatusRequest(app_id=app.app_id, user_id="out-of-order", as_of_ms=T0), metadata=auth(read_key))
ga = {g.subscription_group_id: g for g in a.groups}["20002002"]
gb = {g.subscription_group_id: g for g in b.groups}["20002002"]
check(ga.state == pb.SUBSCRIPTION_STATE_REVOKED and gb.state == ga.state and gb.product_id == ga.product_id, (ga, gb))

# Rotation: the previous secret keeps working during the overlap, so no notification is lost.
secret2 = "fedcba9876543210fedcba9876543210"
secrets.append(secret2)
rot = admin.SetSharedSecret(pb.SetSharedSecretRequest(app_id=app.app_id, shared_secret=secret2), metadata=auth(admin_key))
check(rot.previous_fingerprint == fp and rot.previous_valid_until_ms > T0, rot)
late = notification("DID_CHANGE_RENEWAL_STATUS", secret1, [first, refunded], [dict(renew[0], auto_renew_status="0")])
check(notify(late)["status"] == "applied", "old secret during overlap")
check(notify(dict(late, password=secret2, notification_type="INTERACTIVE_RENEWAL"))["status"] == "applied", "new secret")
app_info = admin.GetApp(pb.GetAppRequest(app_id=app.app_id), metadata=auth(admin_key)).app
check(app_info.shared_secret_fingerprint == rot.fingerprint and app_info.previous_shared_secret_fingerprint == fp, app_info)

# Metrics saw it all.
with urllib.request.urlopen(f"http://{http_addr}/metrics", timeout=10) as r:
    metrics = r.read().decode()
check('substatus_rpcs_total{method="/substatus.v1.EligibilityService/CheckEligibility",code="OK"}' in metrics, "metrics")
check('substatus_notifications_total{outcome="duplicate"} 1' in metrics, "notification metrics")
check('substatus_grpc_buffered_request_bytes ' in metrics and 'substatus_grpc_connections_closed_total{reason="write_timeout"}' in metrics, "transport limit metrics")
check('substatus_grpc_calls_in_flight_limit 1024\n' in metrics and 'substatus_grpc_connections_evicted_total ' in metrics, "transport cap and budget metrics")
check('substatus_http_connections_limit ' in metrics and 'substatus_memory_trims_total ' in metrics, "HTTP listener and memory metrics")
check('substatus_heap_allocated_bytes ' in metrics and 'substatus_sqlite_memory_bytes ' in metrics
      and 'substatus_user_key_cache_entries ' in metrics and 'substatus_history_cache_fills_total ' in metrics, "memory breakdown metrics")

print(f"{checks} passed, 0 failed")
print("SECRETS " + " ".join(secrets))
