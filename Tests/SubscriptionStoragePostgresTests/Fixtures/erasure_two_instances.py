"""Erasure and cursors across two substatusd instances on one PostgreSQL database (grpcio).

usage: erasure_two_instances.py GRPC_A GRPC_B OPERATOR_KEY PROTOS_DIR
A watch from the start through B fills B's window of the app's events; the user is erased through
A; a new watch from the start through B then never shows the user's events (B learns of the
erasure from the log, not from A). A cursor made by A is read by B (same master key), and another
app's cursor is refused with INVALID_ARGUMENT by both. Prints `N passed, 0 failed`.
"""
import glob, importlib, os, queue, sys, tempfile, threading, time

import grpc
import grpc_tools
from grpc_tools import protoc

grpc_a, grpc_b, operator_key, protos = sys.argv[1:5]

out = tempfile.mkdtemp()
files = sorted(os.path.relpath(p, protos) for p in glob.glob(os.path.join(protos, "**/*.proto"), recursive=True))
builtin = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
assert protoc.main(["protoc", f"-I{protos}", f"-I{builtin}", f"--python_out={out}", f"--grpc_python_out={out}", *files]) == 0
sys.path.insert(0, out)
grpc.__path__.append(os.path.join(out, "grpc"))
m = {f: importlib.import_module(f[:-6].replace("/", ".") + "_pb2") for f in files}
g = {f: importlib.import_module(f[:-6].replace("/", ".") + "_pb2_grpc") for f in files if "service" in f}
pb = type("pb", (), {})
for f, mod in m.items():
    for name in dir(mod):
        if not name.startswith("_"):
            setattr(pb, name, getattr(mod, name))


def stubs(addr):
    channel = grpc.insecure_channel(addr)
    s = lambda name: getattr(g[f"substatus/v1/{name}.proto"], "".join(w.title() for w in name.split("_")) + "Stub")(channel)
    return type("stubs", (), dict(tenants=s("tenant_service"), admin=s("admin_service"), ingest=s("ingest_service"),
                                  events=s("event_service")))


A, B = stubs(grpc_a), stubs(grpc_b)
checks = 0


def check(cond, what):
    global checks
    assert cond, what
    checks += 1


def auth(key):
    return (("authorization", "Bearer " + key),)


admin = A.tenants.CreateTenant(pb.CreateTenantRequest(name="erasure"), metadata=auth(operator_key)).admin_key
app = A.admin.RegisterApp(pb.RegisterAppRequest(bundle_id="com.example.erasure"), metadata=auth(admin)).app.app_id
other = A.admin.RegisterApp(pb.RegisterAppRequest(bundle_id="com.example.erasure.other"), metadata=auth(admin)).app.app_id
for a in (app, other):
    A.admin.PutProducts(pb.PutProductsRequest(app_id=a, products=[pb.Product(product_id="lifetime", type=pb.PRODUCT_TYPE_NON_CONSUMABLE)]), metadata=auth(admin))
start = A.events.ListEvents(pb.ListEventsRequest(app_id=app), metadata=auth(admin)).next_cursor
T0 = int(time.time() * 1000) - 60_000


def buy(a, user, tid):
    A.ingest.ImportTransactions(pb.ImportTransactionsRequest(app_id=a, user_id=user, transactions=[pb.Transaction(transaction_id=tid, original_transaction_id=tid, product_id="lifetime", purchase_date_ms=T0)]), metadata=auth(admin), timeout=10)


def watch(stub, since):
    """A watch in a thread: its events arrive on a queue."""
    events = queue.Queue()
    call = stub.events.WatchEvents(pb.WatchEventsRequest(app_id=app, since_cursor=since), metadata=auth(admin))

    def run():
        try:
            for response in call:
                events.put(response.event)
        except grpc.RpcError:
            pass
    threading.Thread(target=run, daemon=True).start()
    return call, events


def take(events, n, timeout=15):
    got = []
    deadline = time.time() + timeout
    while len(got) < n and time.time() < deadline:
        try:
            got.append(events.get(timeout=0.2))
        except queue.Empty:
            pass
    return got


buy(app, "alice", "5001")
buy(app, "bob", "5002")
buy(other, "zed", "6001")
# B's window of the app holds both users' events.
first, first_events = watch(B, start)
check(sorted(e.user_id for e in take(first_events, 2)) == ["alice", "bob"], "the first watch through B")
A.admin.DeleteUser(pb.DeleteUserRequest(app_id=app, user_id="alice"), metadata=auth(admin))
# With the first watch open, a new watch from the start through B: bob, then carol, never alice.
second, second_events = watch(B, start)
time.sleep(0.5)
buy(app, "carol", "5003")
seen = [e.user_id for e in take(second_events, 2)]
check(seen == ["bob", "carol"], f"the new watch through B after the erasure through A: {seen}")
check([e.user_id for e in take(first_events, 1)] == ["carol"], "the first watch goes on")
first.cancel()
second.cancel()

# Cursors: A's are read by B; another app's are refused by both.
listed = A.events.ListEvents(pb.ListEventsRequest(app_id=app), metadata=auth(admin)).events
check([e.user_id for e in listed] == ["bob", "carol"], [e.user_id for e in listed])
after_bob = B.events.ListEvents(pb.ListEventsRequest(app_id=app, since_cursor=listed[0].cursor), metadata=auth(admin)).events
check([e.user_id for e in after_bob] == ["carol"], "A's cursor read by B")
others = A.events.ListEvents(pb.ListEventsRequest(app_id=other), metadata=auth(admin)).events
for stub in (A, B):
    try:
        stub.events.ListEvents(pb.ListEventsRequest(app_id=app, since_cursor=others[0].cursor), metadata=auth(admin))
        check(False, "another app's cursor was accepted")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and "since_cursor" in e.details(), e)

print(f"{checks} passed, 0 failed")
