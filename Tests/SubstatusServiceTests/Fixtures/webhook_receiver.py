"""A webhook receiver for the dispatcher tests: verifies Substatus-Signature independently of
substatus (Python's hmac), answers by path, and reports each request as a JSON line on stdout.

usage: webhook_receiver.py SECRET
First line printed: PORT <n> (bound on 127.0.0.1, port 0); it exits when its stdin ends. Paths:
  /ok/...          200
  /fail/N/...      500 for the first N requests of each event id, then 200
  /status/CODE/... CODE
  /hang/...        never answers in time (holds the request 60 s)
"""
import hashlib
import hmac
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRET = sys.argv[1].encode()
LOCK = threading.Lock()
SEEN = {}


def report(record):
    with LOCK:
        sys.stdout.write(json.dumps(record) + "\n")
        sys.stdout.flush()


def verify(header, body):
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    t, v1 = parts.get("t", ""), parts.get("v1", "")
    expected = hmac.new(SECRET, t.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, v1), t


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        ok, t = verify(self.headers.get("Substatus-Signature", ""), body)
        event = json.loads(body or b"{}")
        event_id = self.headers.get("Substatus-Event-Id", "")
        parts = self.path.strip("/").split("/")
        with LOCK:
            SEEN[(parts[0], event_id)] = SEEN.get((parts[0], event_id), 0) + 1
            n = SEEN[(parts[0], event_id)]
        if parts[0] == "fail":
            status = 500 if n <= int(parts[1]) else 200
        elif parts[0] == "status":
            status = int(parts[1])
        elif parts[0] == "hang":
            status = 0
        else:
            status = 200
        report({
            "path": self.path, "event_id": event_id, "body_event_id": event.get("eventId", ""),
            "user": event.get("userId", ""), "type": event.get("type", ""), "signature_ok": ok,
            "t": t, "content_type": self.headers.get("Content-Type", ""),
            "user_agent": self.headers.get("User-Agent", ""), "status": status,
        })
        if status == 0:
            time.sleep(60)
            return
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


def exit_with_parent():
    # The test keeps stdin open; its end (the test finished or died) ends the receiver.
    sys.stdin.read()
    os._exit(0)


signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
signal.signal(signal.SIGTERM, signal.SIG_DFL)
threading.Thread(target=exit_with_parent, daemon=True).start()
server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print("PORT %d" % server.server_address[1], flush=True)
server.serve_forever()
