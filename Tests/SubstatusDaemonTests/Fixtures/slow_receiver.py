"""A slow webhook receiver for the fairness end-to-end test: answers every POST 200 after DELAY
seconds (a receiver that takes its time, as a tenant's backlog would meet), whatever its signature.

usage: slow_receiver.py [DELAY]
Prints `PORT <n>` (bound on 127.0.0.1, port 0), then one JSON line per request answered:
{"event_id", "type", "user_id", "valid": true, "dup": false, "status": 200} (the same lines as
event_receiver.py, so the tests read both alike). Ends when stdin closes.
"""
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DELAY = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        time.sleep(DELAY)
        try:
            event = json.loads(body)
        except ValueError:
            event = {}
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
        with LOCK:
            sys.stdout.write(json.dumps({
                "event_id": self.headers.get("Substatus-Event-Id", ""), "type": event.get("type", ""),
                "user_id": event.get("userId", ""), "valid": True, "dup": False, "status": 200}) + "\n")
            sys.stdout.flush()


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdout.write(f"PORT {server.server_address[1]}\n")
    sys.stdout.flush()
    for _ in sys.stdin:
        pass
    server.shutdown()


if __name__ == "__main__":
    main()
