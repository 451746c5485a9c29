"""A Connect / gRPC-Web streaming client for the gateway tests, reporting each envelope as it arrives.

Usage: stream_client.py PORT PATH CONTENT-TYPE BODY-HEX [quiet]
POSTs the body, prints `HEAD <status> <content-type>`, then one line per envelope as it arrives,
`FRAME <flags> <payload as text>`, and `END` when the body ends. With `quiet`, message envelopes
(flags 0) are only counted: `COUNT <n>` comes before the last envelope's line. With `stall`, the
body is not read at all (a client that pauses). A `close` line on stdin closes the connection at
once and prints `CLOSED`.
"""
import http.client
import sys
import threading

port, path, content_type, body = int(sys.argv[1]), sys.argv[2], sys.argv[3], bytes.fromhex(sys.argv[4])
quiet = len(sys.argv) > 5 and sys.argv[5] == "quiet"
stall = len(sys.argv) > 5 and sys.argv[5] == "stall"
connection = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
connection.request("POST", path, body=body, headers={"Content-Type": content_type})
response = connection.getresponse()
print("HEAD", response.status, response.getheader("Content-Type", "-"), flush=True)


def read_frames():
    count = 0
    try:
        while True:
            head = response.read(5)
            if len(head) < 5:
                print("END", flush=True)
                return
            length = int.from_bytes(head[1:5], "big")
            payload = response.read(length)
            if quiet and head[0] == 0:
                count += 1
                continue
            if quiet:
                print("COUNT", count, flush=True)
            print("FRAME", head[0], payload.decode("utf-8", "replace").strip().replace("\r\n", "; "), flush=True)
    except Exception:
        pass


if not stall:
    threading.Thread(target=read_frames, daemon=True).start()
for line in sys.stdin:
    if line.strip() == "close":
        connection.sock.close()
        print("CLOSED", flush=True)
        break
