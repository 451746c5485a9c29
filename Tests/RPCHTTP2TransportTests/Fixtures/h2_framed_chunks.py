"""Sends one request body whose gRPC messages are cut across DATA frames in chosen places.

Usage: h2_framed_chunks.py PORT CASE. Calls /interop.Test/Collect (which answers with its request
messages joined by "|") with the body of CASE, one DATA frame per element of its list:

  split       two whole messages and the first 3 bytes of a third in one frame, the rest of the
              third and a fourth in the next (answer "m1|m2|message-3|m4")
  prefixcut   a whole message and 2 bytes of the next one's prefix, then the rest ("m1|m2")
  compressed  a whole message, then one with the compressed flag set and no grpc-encoding
              (answer: grpc-status 13, INTERNAL)
  oversize    a whole message, then one announcing more than the server's maximum of 1000 bytes
              (answer: grpc-status 8, RESOURCE_EXHAUSTED)

Prints "RESULT <json>" with the grpc-status and the body's message, then "DONE".
"""
import json
import socket
import struct
import sys
import time

import h2.config
import h2.connection
import h2.events


def frame(payload, flag=0):
    return bytes([flag]) + struct.pack(">I", len(payload)) + payload


m1, m2, m3, m4 = frame(b"m1"), frame(b"m2"), frame(b"message-3"), frame(b"m4")
CASES = {
    "split": [m1 + m2 + m3[:3], m3[3:] + m4],
    "prefixcut": [m1 + m2[:2], m2[2:]],
    "compressed": [m1 + frame(b"zz", flag=1)],
    "oversize": [m1 + b"\x00" + struct.pack(">I", 5000) + b"x" * 10, b"y" * 10],
}

port, case = int(sys.argv[1]), sys.argv[2]
s = socket.create_connection(("127.0.0.1", port), timeout=10)
conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
conn.initiate_connection()
s.sendall(conn.data_to_send())
sid = conn.get_next_available_stream_id()
conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":path", "/interop.Test/Collect"),
                        (":authority", "localhost"), ("content-type", "application/grpc"), ("te", "trailers")])
chunks = CASES[case]
for i, chunk in enumerate(chunks):
    conn.send_data(sid, chunk, end_stream=i == len(chunks) - 1)
    s.sendall(conn.data_to_send())
    time.sleep(0.05)  # separate reads on the server: each chunk its own DATA event

body, status, ended = b"", None, False
deadline = time.monotonic() + 10
while not ended and time.monotonic() < deadline:
    data = s.recv(65536)
    if not data:
        break
    for event in conn.receive_data(data):
        if isinstance(event, h2.events.DataReceived) and event.stream_id == sid:
            body += event.data
            conn.acknowledge_received_data(event.flow_controlled_length, sid)
        elif isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)) and event.stream_id == sid:
            for name, value in event.headers:
                if name == "grpc-status":
                    status = int(value)
        elif isinstance(event, h2.events.StreamEnded) and event.stream_id == sid:
            ended = True
        elif isinstance(event, h2.events.StreamReset) and event.stream_id == sid:
            ended = True
    s.sendall(conn.data_to_send())
message = body[5:].decode() if len(body) >= 5 else ""
print("RESULT " + json.dumps({"status": status, "message": message}))
print("DONE")
