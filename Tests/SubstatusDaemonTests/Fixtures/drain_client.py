"""A gRPC call held in flight across substatusd's SIGTERM (ShutdownEndToEndTests).

Usage: drain_client.py HOST:PORT OPERATOR_KEY NAME

Opens an HTTP/2 connection, sends the HEADERS of TenantService.CreateTenant without its body and
prints `SENT`; on the line `GO` on stdin (the test has sent SIGTERM and seen the daemon drain), it
sends the body and prints one JSON line: the call's grpc-status, whether a GOAWAY came, and the
length of the answer's message.
"""
import json
import socket
import sys

import h2.config
import h2.connection
import h2.events

host, port = sys.argv[1].rsplit(":", 1)
key, name = sys.argv[2], sys.argv[3]

sock = socket.create_connection((host, int(port)), timeout=30)
conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
# h2 closes its side of the connection on a GOAWAY; a graceful GOAWAY still lets the streams it
# names finish, so the client keeps reading them (the GOAWAY is only recorded).
result = {"status": None, "goaway": False, "message_bytes": 0}
process_input = conn.state_machine.process_input


def keep_open_on_goaway(input_):
    if input_ == h2.connection.ConnectionInputs.RECV_GOAWAY:
        result["goaway"] = True
        return []
    return process_input(input_)


conn.state_machine.process_input = keep_open_on_goaway
conn.initiate_connection()
sock.sendall(conn.data_to_send())
stream = conn.get_next_available_stream_id()
conn.send_headers(stream, [
    (":method", "POST"), (":scheme", "http"), (":authority", sys.argv[1]),
    (":path", "/substatus.v1.TenantService/CreateTenant"),
    ("content-type", "application/grpc"), ("te", "trailers"), ("authorization", "Bearer " + key),
])
sock.sendall(conn.data_to_send())
print("SENT", flush=True)

if sys.stdin.readline().strip() != "GO":
    sys.exit(2)
encoded = name.encode()
message = bytes([0x0A, len(encoded)]) + encoded  # CreateTenantRequest.name = 1
conn.send_data(stream, bytes([0]) + len(message).to_bytes(4, "big") + message, end_stream=True)
sock.sendall(conn.data_to_send())

ended = False
while not ended:
    data = sock.recv(65536)
    if not data:
        break
    for event in conn.receive_data(data):
        if isinstance(event, h2.events.ConnectionTerminated):
            result["goaway"] = True
        elif isinstance(event, h2.events.DataReceived):
            result["message_bytes"] += len(event.data)
            conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, (h2.events.TrailersReceived, h2.events.ResponseReceived)):
            for header, value in event.headers:
                if header == "grpc-status":
                    result["status"] = int(value)
        elif isinstance(event, h2.events.StreamEnded):
            ended = True
    outgoing = conn.data_to_send()
    if outgoing:
        sock.sendall(outgoing)
print(json.dumps(result), flush=True)
