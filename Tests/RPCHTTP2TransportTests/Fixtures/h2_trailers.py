"""A peer that advertises a SETTINGS_MAX_HEADER_LIST_SIZE too small for an error's header block.

Usage: h2_trailers.py PORT. With SETTINGS_MAX_HEADER_LIST_SIZE 150 (RFC 9113 counts each field as
name + value + 32 bytes), it calls /interop.Test/Echo, whose headers and trailers fit, then
/interop.Test/Fail, whose Trailers-Only answer (grpc-status, grpc-message, x-reason) does not, and
an Echo whose response headers (echoing a 200-byte x-echo) do not: the server must reset those
streams (RST_STREAM INTERNAL_ERROR) rather than send the blocks or leave the streams open, and the
first Echo call must succeed on the same connection. Prints "RESULT {...}" and
"DONE"; fails (non-zero exit) otherwise, including when h2 refuses a block over the limit.
"""
import json
import socket
import struct
import sys
import time

import h2.config
import h2.connection
import h2.events
import h2.settings

port = int(sys.argv[1])
s = socket.create_connection(("127.0.0.1", port), timeout=10)
conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
conn.initiate_connection()
conn.update_settings({h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: 150})
s.sendall(conn.data_to_send())

# Wait for the server's acknowledgement of our settings before calling.
acked = False
deadline = time.monotonic() + 10
while not acked and time.monotonic() < deadline:
    for event in conn.receive_data(s.recv(65536)):
        if isinstance(event, h2.events.SettingsAcknowledged):
            acked = True
    s.sendall(conn.data_to_send())
assert acked, "no SETTINGS ACK"


def call(path, extra=()):
    sid = conn.get_next_available_stream_id()
    conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "localhost"),
                            ("content-type", "application/grpc"), ("te", "trailers")] + list(extra))
    conn.send_data(sid, b"\x00" + struct.pack(">I", 2) + b"hi", end_stream=True)
    return sid


# Echo sends x- request fields back as response headers: with 200 bytes of it, the response's
# headers (followed by a body) do not fit either.
echo, fail, big = call("/interop.Test/Echo"), call("/interop.Test/Fail"), call("/interop.Test/Echo", [("x-echo", "y" * 200)])
s.sendall(conn.data_to_send())
streams = {sid: {"headers": {}, "ended": False, "reset": None} for sid in (echo, fail, big)}
deadline = time.monotonic() + 10
s.settimeout(1)
while time.monotonic() < deadline and not all(v["ended"] or v["reset"] is not None for v in streams.values()):
    try:
        data = s.recv(65536)
    except socket.timeout:
        continue
    if not data:
        break
    for event in conn.receive_data(data):
        if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
            streams[event.stream_id]["headers"].update(dict(event.headers))
        elif isinstance(event, h2.events.DataReceived):
            conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            streams[event.stream_id]["ended"] = True
        elif isinstance(event, h2.events.StreamReset):
            streams[event.stream_id]["reset"] = int(event.error_code)
    s.sendall(conn.data_to_send())
s.close()
print("RESULT " + json.dumps({"echo": streams[echo], "fail": streams[fail], "big": streams[big]}), flush=True)
assert streams[echo]["ended"] and streams[echo]["headers"].get("grpc-status") == "0", streams[echo]
assert streams[fail]["reset"] == 2, f"the Fail stream was not reset with INTERNAL_ERROR: {streams[fail]}"
assert not streams[fail]["headers"], streams[fail]
assert streams[big]["reset"] == 2 and not streams[big]["headers"], f"the big Echo was not reset: {streams[big]}"
print("DONE", flush=True)
