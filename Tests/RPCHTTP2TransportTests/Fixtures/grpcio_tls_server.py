"""A stock Python grpcio server with TLS for the client interop tests (generic raw-bytes handlers).

Usage: grpcio_tls_server.py CERT KEY [CLIENT_CA]. Binds 127.0.0.1:0, prints "PORT <n>", serves
until stdin closes. With CLIENT_CA, clients must present a certificate it signed.
Methods of /interop.Test: Echo (echoes the message; x-peer-cn trailer names the client certificate's
common name, when there is one).
"""
import sys
from concurrent import futures

import grpc


def echo(request, context):
    common_names = context.auth_context().get("x509_common_name", [])
    context.set_trailing_metadata([("x-peer-cn", b",".join(common_names).decode())])
    return request


cert = open(sys.argv[1], "rb").read()
key = open(sys.argv[2], "rb").read()
client_ca = open(sys.argv[3], "rb").read() if len(sys.argv) > 3 else None
credentials = grpc.ssl_server_credentials(
    [(key, cert)], root_certificates=client_ca, require_client_auth=client_ca is not None)
server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("interop.Test", {
    "Echo": grpc.unary_unary_rpc_method_handler(echo, request_deserializer=None, response_serializer=None)})])
port = server.add_secure_port("127.0.0.1:0", credentials)
server.start()
print(f"PORT {port}", flush=True)
sys.stdin.read()
server.stop(0)
