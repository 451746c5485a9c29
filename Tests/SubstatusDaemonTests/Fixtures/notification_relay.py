"""The network between the App Store simulator and substatusd in the fault tests: forwards each
POST to the current target and answers with the target's status, 502 when the target cannot be
reached (the simulator then retries later, as Apple does). substatusd restarted on new ports is
reached at the same URL: the simulator keeps each notification's URL for its retries.

usage: notification_relay.py
Prints `PORT <n>` (bound on 127.0.0.1, port 0), then reads commands from stdin:
  TARGET <host:port>   where to forward
  KILL <pid> <n>       SIGKILL <pid> 2 ms after the request following the n-th starts being
                       forwarded (a kill while that write is in flight)
Each request is reported on stdout as a JSON line: {"n", "status"} (n: its number, from 1).
"""
import http.client
import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STATE = {"target": None, "kill": None, "count": 0}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with LOCK:
            STATE["count"] += 1
            n, target, kill = STATE["count"], STATE["target"], STATE["kill"]
        if kill is not None and n == kill[1] + 1:
            threading.Timer(0.002, os.kill, (kill[0], signal.SIGKILL)).start()
        status = 502
        try:
            host, port = target.rsplit(":", 1)
            connection = http.client.HTTPConnection(host, int(port), timeout=30)
            connection.request("POST", self.path, body, {"Content-Type": self.headers.get("Content-Type", "application/json")})
            response = connection.getresponse()
            response.read()
            status = response.status
            connection.close()
        except Exception:
            status = 502
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()
        with LOCK:
            sys.stdout.write(json.dumps({"n": n, "status": status}) + "\n")
            sys.stdout.flush()


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print("PORT", server.server_address[1], flush=True)
threading.Thread(target=server.serve_forever, daemon=True).start()
for line in sys.stdin:
    words = line.split()
    if not words:
        continue
    with LOCK:
        if words[0] == "TARGET":
            STATE["target"] = words[1]
        elif words[0] == "KILL":
            STATE["kill"] = (int(words[1]), int(words[2]))
    print("OK", words[0], flush=True)
server.shutdown()
