"""Connect's GET form against a real substatusd, with the Python `connectrpc` client (use_get=True).

Usage: connect_get.py HTTP_ADDRESS OPERATOR_KEY PROTOS_DIR
GetCallerApiKey (NO_SIDE_EFFECTS, any key) answers a GET in JSON and in binary, gzip-compressed
too; CreateTenant (no idempotency level) is refused with 405 and `allow: POST`, and creates nothing.
Prints "N passed, 0 failed" and exits 0, or raises.
"""
import importlib
import os
import sys
import tempfile
import urllib.error
import urllib.request

import grpc_tools
from grpc_tools import protoc

address, operator_key, protos = sys.argv[1:4]
out = tempfile.mkdtemp(prefix="connect-get-")
builtin = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
files = ["substatus/v1/common.proto", "substatus/v1/options.proto", "substatus/v1/admin_service.proto",
         "substatus/v1/tenant_service.proto"]
assert protoc.main(["protoc", f"-I{protos}", f"-I{builtin}", f"--python_out={out}", *files]) == 0
sys.path.insert(0, out)
admin = importlib.import_module("substatus.v1.admin_service_pb2")
tenant = importlib.import_module("substatus.v1.tenant_service_pb2")

import pyqwest  # noqa: E402
from connectrpc.client import ConnectClientSync  # noqa: E402
from connectrpc.compat import google_protobuf_binary_codec, google_protobuf_json_codec  # noqa: E402
from connectrpc.errors import ConnectError  # noqa: E402
from connectrpc.method import IdempotencyLevel, MethodInfo, StreamType  # noqa: E402

headers = {"authorization": f"Bearer {operator_key}"}
caller = MethodInfo(
    name="GetCallerApiKey", service_name="substatus.v1.AdminService", input=admin.GetCallerApiKeyRequest,
    output=admin.GetCallerApiKeyResponse, idempotency_level=IdempotencyLevel.NO_SIDE_EFFECTS,
    stream_type=StreamType.UNARY)
passed = 0
for codec in (google_protobuf_json_codec(), google_protobuf_binary_codec()):
    for gzip in (False, True):
        http = pyqwest.SyncClient(pyqwest.SyncHTTPTransport(http_version=pyqwest.HTTPVersion.HTTP1))
        # The client gzips what it sends by default (in a GET, the message, with compression=gzip).
        options = {} if gzip else {"send_compression": None}
        client = ConnectClientSync(f"http://{address}", codec=codec, http_client=http, **options)
        reply = client.execute_unary(
            request=admin.GetCallerApiKeyRequest(), method=caller, headers=headers, use_get=True)
        assert reply.operator_key, reply
        passed += 1

# The client sends what it is told: a GET of CreateTenant, declared as if it had no side effects.
create = MethodInfo(
    name="CreateTenant", service_name="substatus.v1.TenantService", input=tenant.CreateTenantRequest,
    output=tenant.CreateTenantResponse, idempotency_level=IdempotencyLevel.NO_SIDE_EFFECTS,
    stream_type=StreamType.UNARY)
client = ConnectClientSync(
    f"http://{address}", codec=google_protobuf_json_codec(),
    http_client=pyqwest.SyncClient(pyqwest.SyncHTTPTransport(http_version=pyqwest.HTTPVersion.HTTP1)))
try:
    client.execute_unary(request=tenant.CreateTenantRequest(name="by-get"), method=create, headers=headers,
                         use_get=True)
    raise AssertionError("CreateTenant answered a GET")
except ConnectError as error:
    passed += 1
# The same GET by hand: 405 with allow: POST.
request = urllib.request.Request(
    f"http://{address}/substatus.v1.TenantService/CreateTenant?encoding=json&message=%7B%22name%22%3A%22x%22%7D",
    headers=headers)
try:
    urllib.request.urlopen(request)
    raise AssertionError("CreateTenant answered a GET")
except urllib.error.HTTPError as error:
    assert error.code == 405 and error.headers["allow"] == "POST", (error.code, dict(error.headers))
    passed += 1
# Nothing was created.
listing = MethodInfo(
    name="ListTenants", service_name="substatus.v1.TenantService", input=tenant.ListTenantsRequest,
    output=tenant.ListTenantsResponse, idempotency_level=IdempotencyLevel.NO_SIDE_EFFECTS,
    stream_type=StreamType.UNARY)
tenants = client.execute_unary(request=tenant.ListTenantsRequest(), method=listing, headers=headers, use_get=True)
assert all(t.name not in ("by-get", "x") for t in tenants.tenants), tenants
passed += 1
print(f"{passed} passed, 0 failed")
