"""Python for Protos/, generated at run time with grpcio-tools' protoc (shared by the interop scripts)."""
import glob, os, sys, tempfile

# Each Connect code's HTTP status (connectrpc.com/docs/protocol, "Error Codes"), and each code's gRPC number.
HTTP_STATUS = {"canceled": 499, "unknown": 500, "invalid_argument": 400, "deadline_exceeded": 504, "not_found": 404,
               "already_exists": 409, "permission_denied": 403, "resource_exhausted": 429, "failed_precondition": 400,
               "aborted": 409, "out_of_range": 400, "unimplemented": 501, "internal": 500, "unavailable": 503,
               "data_loss": 500, "unauthenticated": 401}
GRPC_CODE = {"canceled": 1, "unknown": 2, "invalid_argument": 3, "deadline_exceeded": 4, "not_found": 5,
             "already_exists": 6, "permission_denied": 7, "resource_exhausted": 8, "failed_precondition": 9,
             "aborted": 10, "out_of_range": 11, "unimplemented": 12, "internal": 13, "unavailable": 14,
             "data_loss": 15, "unauthenticated": 16}


def generate(protos, connect=False):
    """Generates messages (google.protobuf) and grpcio stubs for every file under PROTOS and, with connect, the
    connectrpc clients (protoc-gen-connectrpc, from the Python's own bin directory, as after
    `pip install protoc-gen-connectrpc`). Puts the output on sys.path; returns the .proto paths."""
    import grpc_tools
    from grpc_tools import protoc
    out = tempfile.mkdtemp()
    files = sorted(os.path.relpath(p, protos) for p in glob.glob(os.path.join(protos, "**/*.proto"), recursive=True))
    builtin = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    args = ["protoc", f"-I{protos}", f"-I{builtin}", f"--python_out={out}", f"--grpc_python_out={out}"]
    if connect:
        os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]
        args += [f"--connectrpc_out={out}", "--connectrpc_opt=protobuf=google"]
    assert protoc.main(args + files) == 0, "protoc failed"
    sys.path.insert(0, out)
    import grpc  # grpcio's package: our grpc/health and grpc/reflection join it as subpackages
    grpc.__path__.append(os.path.join(out, "grpc"))
    return files


def setup_tenant(grpc_addr, operator_key, name):
    """Over gRPC (grpcio): a tenant, an app with two products, user-1's trial of premium.monthly
    (used up) and a read key. Returns (admin key, app id, read key)."""
    import grpc
    from substatus.v1 import admin_service_pb2 as admin_pb, admin_service_pb2_grpc as admin_grpc
    from substatus.v1 import common_pb2, transaction_pb2
    from substatus.v1 import ingest_service_pb2 as ingest_pb, ingest_service_pb2_grpc as ingest_grpc
    from substatus.v1 import tenant_service_pb2 as tenant_pb, tenant_service_pb2_grpc as tenant_grpc
    channel = grpc.insecure_channel(grpc_addr)
    auth = lambda key: (("authorization", f"Bearer {key}"),)
    admin_key = tenant_grpc.TenantServiceStub(channel).CreateTenant(
        tenant_pb.CreateTenantRequest(name=name), metadata=auth(operator_key)).admin_key
    admin = admin_grpc.AdminServiceStub(channel)
    app_id = admin.RegisterApp(admin_pb.RegisterAppRequest(bundle_id="com.example.app"), metadata=auth(admin_key)).app.app_id
    products = [common_pb2.Product(product_id=p, type=common_pb2.PRODUCT_TYPE_AUTO_RENEWABLE, subscription_group_id="20001001",
                                   duration=d, has_introductory_offer=True) for p, d in [("premium.monthly", "P1M"), ("premium.yearly", "P1Y")]]
    admin.PutProducts(admin_pb.PutProductsRequest(app_id=app_id, products=products), metadata=auth(admin_key))
    trial = transaction_pb2.Transaction(transaction_id="1000", original_transaction_id="1000", product_id="premium.monthly",
                                        purchase_date_ms=1704067200000, expires_date_ms=1704672000000, is_trial_period=True)
    ingest_grpc.IngestServiceStub(channel).ImportTransactions(
        ingest_pb.ImportTransactionsRequest(app_id=app_id, user_id="user-1", transactions=[trial]), metadata=auth(admin_key))
    read_key = admin.CreateApiKey(admin_pb.CreateApiKeyRequest(role=common_pb2.API_KEY_ROLE_READ, app_ids=[app_id]),
                                  metadata=auth(admin_key)).key
    return admin_key, app_id, read_key
