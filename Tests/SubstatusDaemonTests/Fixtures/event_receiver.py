"""A backend's webhook receiver for the events end-to-end tests, independent of substatus: verifies
Substatus-Signature with Python's hmac and deduplicates by Substatus-Event-Id, as the README tells
receivers to.

usage: event_receiver.py [--ipv6]
Prints `PORT <n>` (bound on 127.0.0.1, or on ::1 with --ipv6, port 0), then reads commands from stdin:
  SECRET <whsec_...>   the signing secret to verify with (requests before it are answered 503)
  DOWN / UP            answer 503 to everything / answer again (UP also ends FAIL and HANG)
  FAIL <status>        answer <status> (e.g. 500) to every request, signed or not
  HANG                 answer nothing: hold each request open (reported on arrival, "hung": true)
                       for 60 s, then close it without an answer
  DELAY <ms>           take <ms> before answering each valid request (0: answer at once)
Each request is reported on stdout as a JSON line: {"event_id", "type", "user_id", "valid", "dup",
"status", "t", "event", "in_flight", "user_in_flight"} (`t`: the signature's timestamp; `event`: the
whole body, parsed; `in_flight`: the requests being handled when it arrived, itself included, and
`user_in_flight` those of its user: a request counts until its answer is decided, before it is
sent, so a sender that waits for one user's answer before sending that user's next event never
shows 2). Answers 200 to a valid request (also to a duplicate: deduplicated, not an error), 401 to a
bad signature.
"""
import hashlib
import hmac
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STATE = {"secret": None, "down": False, "fail": None, "hang": False, "delay": 0.0}
SEEN = set()
IN_FLIGHT = {"all": 0, "users": {}}


def report(record):
    with LOCK:
        sys.stdout.write(json.dumps(record) + "\n")
        sys.stdout.flush()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        if len(body) < length:
            # The sender went (a SIGKILL mid-POST): an incomplete request is no request, as for
            # any HTTP server; nothing is answered or reported.
            self.close_connection = True
            return
        try:
            user = json.loads(body).get("userId", "")
        except ValueError:
            user = ""
        with LOCK:
            IN_FLIGHT["all"] += 1
            IN_FLIGHT["users"][user] = IN_FLIGHT["users"].get(user, 0) + 1
            self.counts = {"in_flight": IN_FLIGHT["all"], "user_in_flight": IN_FLIGHT["users"][user]}
        self.user, self.counted = user, True
        try:
            self.post(body)
        finally:
            self.uncount()

    def uncount(self):
        if self.counted:
            self.counted = False
            with LOCK:
                IN_FLIGHT["all"] -= 1
                IN_FLIGHT["users"][self.user] -= 1

    def post(self, body):
        event_id = self.headers.get("Substatus-Event-Id", "")
        with LOCK:
            secret, down, fail, hang = STATE["secret"], STATE["down"], STATE["fail"], STATE["hang"]
            delay = STATE["delay"]
        if secret is None or down:
            return self.answer(503, event_id, body, valid=False, dup=False)
        fields = dict(p.split("=", 1) for p in self.headers.get("Substatus-Signature", "").split(",") if "=" in p)
        expected = hmac.new(secret.encode(), fields.get("t", "").encode() + b"." + body, hashlib.sha256).hexdigest()
        valid = hmac.compare_digest(expected, fields.get("v1", ""))
        if hang:
            report(self.record(0, event_id, body, valid, False, fields) | {"hung": True})
            time.sleep(60)
            self.close_connection = True
            return
        if fail is not None:
            return self.answer(fail, event_id, body, valid=valid, dup=False, fields=fields)
        if not valid:
            return self.answer(401, event_id, body, valid=False, dup=False, fields=fields)
        if delay:
            time.sleep(delay)
        with LOCK:
            dup = event_id in SEEN
            SEEN.add(event_id)
        self.answer(200, event_id, body, valid=True, dup=dup, fields=fields)

    @staticmethod
    def record(status, event_id, body, valid, dup, fields):
        try:
            event = json.loads(body)
        except ValueError:
            event = {}
        t = fields.get("t", "")
        return {"event_id": event_id, "body_event_id": event.get("eventId", ""), "type": event.get("type", ""),
                "user_id": event.get("userId", ""), "valid": valid, "dup": dup, "status": status,
                "t": int(t) if t.isdigit() else 0, "event": event}

    def answer(self, status, event_id, body, valid, dup, fields=None):
        self.uncount()  # decided: the sender may go on once it has the answer
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()
        report(self.record(status, event_id, body, valid, dup, fields or {}) | self.counts)


class IPv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


server = IPv6Server(("::1", 0), Handler) if "--ipv6" in sys.argv[1:] else ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print("PORT", server.server_address[1], flush=True)
threading.Thread(target=server.serve_forever, daemon=True).start()
for line in sys.stdin:
    words = line.split()
    if not words:
        continue
    with LOCK:
        if words[0] == "SECRET":
            STATE["secret"] = words[1]
        elif words[0] == "DOWN":
            STATE["down"] = True
        elif words[0] == "UP":
            STATE["down"], STATE["fail"], STATE["hang"] = False, None, False
        elif words[0] == "FAIL":
            STATE["fail"] = int(words[1])
        elif words[0] == "HANG":
            STATE["hang"] = True
        elif words[0] == "DELAY":
            STATE["delay"] = int(words[1]) / 1000
    print("OK", words[0], flush=True)
server.shutdown()
