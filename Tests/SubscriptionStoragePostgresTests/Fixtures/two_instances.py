"""Two substatusd instances on one PostgreSQL database, over real gRPC (grpcio) and HTTP.

usage: two_instances.py GRPC_A HTTP_A GRPC_B HTTP_B OPERATOR_KEY PID_A PROTOS_DIR
Writes through A are read through B; one V1 notification delivered to both at once is applied once;
A is killed (SIGKILL) while four clients ingest through it, and every acknowledged write is then
read back through B. Prints `N passed, 0 failed` and `acked X stored Y`.
"""
import glob, importlib, json, os, signal, sys, tempfile, threading, time, urllib.error, urllib.request

import grpc
import grpc_tools
from grpc_tools import protoc

grpc_a, http_a, grpc_b, http_b, operator_key, pid_a, protos = sys.argv[1:8]

# Stubs from the repository's own .proto files.
out = tempfile.mkdtemp()
files = sorted(os.path.relpath(p, protos) for p in glob.glob(os.path.join(protos, "**/*.proto"), recursive=True))
builtin = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
assert protoc.main(["protoc", f"-I{protos}", f"-I{builtin}", f"--python_out={out}", f"--grpc_python_out={out}", *files]) == 0
sys.path.insert(0, out)
grpc.__path__.append(os.path.join(out, "grpc"))
m = {f: importlib.import_module(f[:-6].replace("/", ".") + "_pb2") for f in files}
g = {f: importlib.import_module(f[:-6].replace("/", ".") + "_pb2_grpc") for f in files if "service" in f or "health" in f}
pb = type("pb", (), {})
for f, mod in m.items():
    for name in dir(mod):
        if not name.startswith("_"):
            setattr(pb, name, getattr(mod, name))
from grpc.health.v1 import health_pb2, health_pb2_grpc

def stubs(addr):
    channel = grpc.insecure_channel(addr)
    s = lambda name: getattr(g[f"substatus/v1/{name}.proto"], "".join(w.title() for w in name.split("_")) + "Stub")(channel)
    return type("stubs", (), dict(tenants=s("tenant_service"), admin=s("admin_service"), ingest=s("ingest_service"),
                                  status=s("status_service"), health=health_pb2_grpc.HealthStub(channel)))
A, B = stubs(grpc_a), stubs(grpc_b)
checks = 0

def check(cond, what):
    global checks
    assert cond, what
    checks += 1

def auth(key):
    return (("authorization", "Bearer " + key),)

def history_ids(stub, key, app_id, user):
    ids, token = [], ""
    while True:
        page = stub.status.GetTransactionHistory(pb.GetTransactionHistoryRequest(app_id=app_id, user_id=user, page_size=1000, page_token=token), metadata=auth(key), timeout=10)
        ids += [t.transaction_id for t in page.transactions]
        token = page.next_page_token
        if not token:
            return ids

for s in (A, B):
    check(s.health.Check(health_pb2.HealthCheckRequest(), timeout=10).status == health_pb2.HealthCheckResponse.SERVING, "health")

# Admin writes through A, reads through B. (Each instance caches an app and its catalog for a few
# seconds, so B reads the app only after A has configured it.)
admin_key = A.tenants.CreateTenant(pb.CreateTenantRequest(name="acme"), metadata=auth(operator_key)).admin_key
app = A.admin.RegisterApp(pb.RegisterAppRequest(bundle_id="com.example.multi", display_name="Multi"), metadata=auth(admin_key)).app
secret = "0123456789abcdef0123456789abcdef"
fp = A.admin.SetSharedSecret(pb.SetSharedSecretRequest(app_id=app.app_id, shared_secret=secret), metadata=auth(admin_key)).fingerprint
A.admin.PutProducts(pb.PutProductsRequest(app_id=app.app_id, products=[pb.Product(product_id="pro.monthly", type=pb.PRODUCT_TYPE_AUTO_RENEWABLE, subscription_group_id="20002002", duration="P1M")]), metadata=auth(admin_key))
got = B.admin.GetApp(pb.GetAppRequest(app_id=app.app_id), metadata=auth(admin_key)).app
check(got.bundle_id == "com.example.multi" and got.shared_secret_fingerprint == fp, got)
check([p.product_id for p in B.admin.ListProducts(pb.ListProductsRequest(app_id=app.app_id), metadata=auth(admin_key)).products] == ["pro.monthly"], "catalog via B")

DAY = 86400000
T0 = 1711324800000
def txn(tid, otid, purchase, expires):
    return pb.Transaction(transaction_id=tid, original_transaction_id=otid, product_id="pro.monthly", purchase_date_ms=purchase, expires_date_ms=expires)
A.ingest.ImportTransactions(pb.ImportTransactionsRequest(app_id=app.app_id, user_id="alice", transactions=[txn("100", "100", T0 - 40 * DAY, T0 - 10 * DAY), txn("101", "100", T0 - 10 * DAY, T0 + 20 * DAY)]), metadata=auth(admin_key))
check(sorted(history_ids(B, admin_key, app.app_id, "alice")) == ["100", "101"], "history via B")
st = B.status.GetStatus(pb.GetStatusRequest(app_id=app.app_id, user_id="alice", as_of_ms=T0), metadata=auth(admin_key))
check({x.subscription_group_id: x.state for x in st.groups}.get("20002002") == pb.SUBSCRIPTION_STATE_ACTIVE, st)

# One V1 notification delivered to both instances at the same moment is applied once.
def notify(http, body, results, barrier):
    req = urllib.request.Request(f"http://{http}/v1/apps/{app.app_id}/apple/notifications", data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"})
    barrier.wait()
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            results.append((r.status, json.loads(r.read().decode())["status"]))
    except urllib.error.HTTPError as e:
        results.append((e.code, e.read().decode()))

def v1(i):
    info = lambda tid, purchase, expires: {"quantity": "1", "product_id": "pro.monthly", "transaction_id": tid, "original_transaction_id": f"9{i:03d}",
        "purchase_date_ms": str(purchase), "expires_date_ms": str(expires), "is_trial_period": "false", "is_in_intro_offer_period": "false",
        "subscription_group_identifier": "20002002", "in_app_ownership_type": "PURCHASED"}
    return {"notification_type": "DID_RENEW", "password": secret, "environment": "PROD", "auto_renew_status": "true",
            "unified_receipt": {"status": 0, "environment": "Production", "latest_receipt": "eA==",
                                "latest_receipt_info": [info(f"9{i:03d}", T0 - 40 * DAY, T0 - 10 * DAY), info(f"9{i:03d}r", T0 - 10 * DAY, T0 + 20 * DAY)],
                                "pending_renewal_info": [{"auto_renew_product_id": "pro.monthly", "product_id": "pro.monthly", "original_transaction_id": f"9{i:03d}", "auto_renew_status": "1"}]}}

for i in range(5):
    user = f"bob{i}"
    A.ingest.ImportTransactions(pb.ImportTransactionsRequest(app_id=app.app_id, user_id=user, transactions=[txn(f"9{i:03d}", f"9{i:03d}", T0 - 40 * DAY, T0 - 10 * DAY)]), metadata=auth(admin_key))
    results, barrier = [], threading.Barrier(2)
    threads = [threading.Thread(target=notify, args=(http, v1(i), results, barrier)) for http in (http_a, http_b)]
    for t in threads: t.start()
    for t in threads: t.join()
    check(sorted(results) == [(200, "applied"), (200, "duplicate")], results)
    check(sorted(history_ids(A, admin_key, app.app_id, user)) == [f"9{i:03d}", f"9{i:03d}r"], f"{user} history")

# SIGKILL A while four clients ingest through it: every acknowledged write is readable through B.
acked = {t: [] for t in range(4)}
stop = threading.Event()
def ingest_loop(t):
    i = 0
    while not stop.is_set():
        tid = f"k{t}-{i}"
        try:
            A.ingest.ImportTransactions(pb.ImportTransactionsRequest(app_id=app.app_id, user_id=f"k{t}", transactions=[txn(tid, tid, T0 + i, T0 + i + DAY)]), metadata=auth(admin_key), timeout=5)
        except grpc.RpcError:
            return
        acked[t].append(tid)
        i += 1
threads = [threading.Thread(target=ingest_loop, args=(t,)) for t in range(4)]
for t in threads: t.start()
deadline = time.time() + 60
while sum(len(v) for v in acked.values()) < 200 and time.time() < deadline:
    time.sleep(0.01)
os.kill(int(pid_a), signal.SIGKILL)
for t in threads: t.join(15)
stop.set()
total = sum(len(v) for v in acked.values())
check(total >= 200, f"only {total} writes acknowledged before the kill")
stored = 0
for t, ids in acked.items():
    have = set(history_ids(B, admin_key, app.app_id, f"k{t}"))
    stored += len(have)
    missing = [x for x in ids if x not in have]
    check(not missing, f"acknowledged but lost: {missing[:5]}")
check(B.health.Check(health_pb2.HealthCheckRequest(), timeout=10).status == health_pb2.HealthCheckResponse.SERVING, "B still serving")
print(f"acked {total} stored {stored}")
print(f"{checks} passed, 0 failed")
