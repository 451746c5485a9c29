"""Attacks on substatusd's HTTP/1.1 listener with raw sockets (issue 30, attacks 6 and 9).

Usage: http_edge.py SCENARIO HTTP_ADDR [ARGS...]

  framing CASE     sends one malformed request head with a second request smuggled behind it:
                   exactly one answer, with the expected status (400, or 501 for an unknown
                   transfer coding) and `Connection: close`, then the end of the connection; the
                   smuggled request is never answered. CASE is a key of FRAMING.
  well_formed      the requests that must still be served (keep-alive, chunked, Cookie...).
  keepalive_flood  64 keep-alive connections from one address, 3 requests each, all at once:
                   every request gets an HTTP answer, 200 or 503 with Retry-After (a client
                   answered `Connection: close` reconnects for its next request); none is closed
                   without an answer.
  proxied_flood    the same from a trusted proxy's address (127.0.0.1, `--trusted-proxies`), each
                   request naming its client in X-Forwarded-For: with 64 clients all 192 requests
                   are served; with one client every request is answered, 200 or 503 + Retry-After.
  nginx NGINX_BIN  a real nginx (listening on a unix socket in a temp dir) in front of the HTTP
                   listener: 40 clients through it are all served; one client holding 24 requests
                   in flight gets 503 with Retry-After past the per-address cap (16) while another
                   client through the same nginx is served; prints the clients' addresses for the
                   caller to find in the daemon's log.
Prints `PASS SCENARIO` and a `FIGURES {...}` line; an assertion fails otherwise.
"""
import json, os, shutil, socket, subprocess, sys, tempfile, threading, time

scenario, http_addr = sys.argv[1], sys.argv[2]
host, port = http_addr.rsplit(":", 1)
port = int(port)
figures = {}

SMUGGLED = b"GET /healthz?smuggled=1 HTTP/1.1\r\nHost: x\r\n\r\n"
# name: (request head and body, expected status)
FRAMING = {
    "content_length_and_chunked": (b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    "chunked_and_content_length": (b"POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n0\r\n\r\n", 400),
    "xchunked": (b"POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 501),
    "chunked_identity": (b"POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 501),
    "chunked_twice": (b"POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    "two_content_lengths": (b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\nhello", 400),
    "obs_fold_space": (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: one\r\n two\r\n\r\n", 400),
    "obs_fold_tab": (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: one\r\n\ttwo\r\n\r\n", 400),
    "obs_fold_first_line": (b"GET /healthz HTTP/1.1\r\n Host: x\r\n\r\n", 400),
    "nul_in_value": (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: on\x00e\r\n\r\n", 400),
    "nul_in_name": (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-\x00A: one\r\n\r\n", 400),
    "bare_lf_everywhere": (b"GET /healthz HTTP/1.1\nHost: x\nX-A: one\n\n", 400),
    "bare_lf_request_line": (b"GET /healthz HTTP/1.1\nHost: x\r\n\r\n", 400),
    "bare_lf_one_field": (b"GET /healthz HTTP/1.1\r\nHost: x\nX-A: one\r\n\r\n", 400),
    "bare_lf_end_of_head": (b"GET /healthz HTTP/1.1\r\nHost: x\r\n\n", 400),
    "bare_cr_in_value": (b"GET /healthz HTTP/1.1\r\nHost: x\rX-A: one\r\n\r\n", 400),
    "space_before_colon": (b"GET /healthz HTTP/1.1\r\nHost : x\r\n\r\n", 400),
    "space_in_target": (b"GET /healthz x HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "control_in_target": (b"GET /health\x01z HTTP/1.1\r\nHost: x\r\n\r\n", 400),
}


def read_answers(sock, timeout=3.0):
    """Reads until the peer closes or `timeout` passes; returns (bytes, closed)."""
    sock.settimeout(0.2)
    data, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            return data, True
        if not chunk:
            return data, True
        data += chunk
    return data, False


def parse_responses(data):
    """The responses in `data`: [(status, {lower-case header: value}, body)]."""
    responses = []
    while data.startswith(b"HTTP/"):
        head, sep, rest = data.partition(b"\r\n\r\n")
        if not sep:
            break
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower().decode()] = value.strip().decode()
        if "content-length" in headers:
            n = int(headers["content-length"])
            body, data = rest[:n], rest[n:]
        elif headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size_line, _, rest = rest.partition(b"\r\n")
                n = int(size_line, 16)
                body += rest[:n]
                rest = rest[n + 2:]
                if n == 0:
                    break
            data = rest
        else:
            body, data = rest, b""
        responses.append((status, headers, body))
    return responses


def framing(case):
    request, expected = FRAMING[case]
    sock = socket.create_connection((host, port))
    sock.sendall(request + SMUGGLED)
    data, closed = read_answers(sock)
    sock.close()
    responses = parse_responses(data)
    figures[case] = {"statuses": [r[0] for r in responses], "closed": closed}
    assert len(responses) == 1, f"{case}: expected one answer, got {len(responses)}: {data[:600]!r}"
    status, headers, body = responses[0]
    assert status == expected, f"{case}: status {status}, expected {expected}: {data[:600]!r}"
    assert headers.get("connection", "").lower() == "close", f"{case}: no Connection: close: {data[:600]!r}"
    assert closed, f"{case}: the connection stayed open after the answer"
    assert b"smuggled" not in data


def request(sock, path=b"/healthz", headers=b""):
    sock.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n")


def read_one(sock, timeout=10.0):
    """Reads one response; returns (status, headers) or None when the connection ended first."""
    sock.settimeout(timeout)
    data = b""
    while True:
        responses = parse_responses(data)
        if responses:
            status, headers, _ = responses[0]
            return status, headers
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, socket.timeout):
            return None
        if not chunk:
            return None
        data += chunk


def well_formed():
    sock = socket.create_connection((host, port))
    cases = [
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nCookie: a=b; c=d\r\nX-Empty:\r\nX-Blank: \r\nX-Trailing: v \t\r\n\r\n",
        b"POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        b"POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n0\r\n\r\n",
        b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
        b"GET /healthz?a=%41&b HTTP/1.1\r\nHost: x\r\nAccept:*/*\r\n\r\n",
    ]
    statuses = []
    for raw in cases:
        sock.sendall(raw)
        answer = read_one(sock)
        assert answer is not None, f"no answer to {raw!r}"
        statuses.append(answer[0])
        assert answer[1].get("connection", "").lower() != "close", f"closed after {raw!r}"
    sock.close()
    figures["statuses"] = statuses
    assert statuses == [200, 405, 405, 405, 200], statuses
    # HTTP/1.0 without Host, and a body-less request with no headers at all.
    sock = socket.create_connection((host, port))
    sock.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
    answer = read_one(sock)
    sock.close()
    assert answer is not None and answer[0] == 200, answer


def flood(connections=64, requests_each=3, source="127.0.0.3", headers_for=lambda i: b""):
    """`connections` keep-alive connections at once, `requests_each` requests each; returns counts."""
    counts = {"200": 0, "503": 0, "other": 0, "silent_close": 0, "reconnects": 0, "503_without_retry_after": 0}
    lock = threading.Lock()
    barrier = threading.Barrier(connections)

    def connect():
        s = socket.socket()
        s.bind((source, 0))
        s.connect((host, port))
        return s

    def client(i):
        sock = connect()
        barrier.wait()
        for n in range(requests_each):
            if sock is None:
                sock = connect()
                with lock:
                    counts["reconnects"] += 1
            try:
                request(sock, headers=headers_for(i))
                answer = read_one(sock)
            except OSError:
                answer = None
            with lock:
                if answer is None:
                    counts["silent_close"] += 1
                elif answer[0] == 200:
                    counts["200"] += 1
                elif answer[0] == 503:
                    counts["503"] += 1
                    if "retry-after" not in answer[1]:
                        counts["503_without_retry_after"] += 1
                else:
                    counts["other"] += 1
            if answer is None or answer[1].get("connection", "").lower() == "close":
                sock.close()
                sock = None
            time.sleep(0.05)
        if sock is not None:
            sock.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return counts


def metrics():
    sock = socket.create_connection((host, port))
    request(sock, b"/metrics")
    sock.settimeout(5)
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
        responses = parse_responses(data)
        if responses and (responses[0][1].get("transfer-encoding") != "chunked" or data.endswith(b"0\r\n\r\n")):
            break
    sock.close()
    values = {}
    for line in parse_responses(data)[0][2].decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def keepalive_flood():
    counts = flood()
    figures["one_address"] = counts
    assert counts["silent_close"] == 0, f"requests closed without an answer: {counts}"
    assert counts["other"] == 0 and counts["503_without_retry_after"] == 0, counts
    assert counts["200"] + counts["503"] == 192, counts
    assert counts["200"] >= 48, counts  # the 16 connections within the cap are served throughout
    m = metrics()
    refused = m['substatus_http_requests_refused_total{reason="connections_per_address"}']
    figures["refused_connections_per_address"] = refused
    assert refused == counts["503"], (refused, counts)


def proxied_flood():
    many = flood(source="127.0.0.1", headers_for=lambda i: b"X-Forwarded-For: 203.0.113.9, 198.51.100.%d\r\n" % (i + 1))
    figures["64_clients"] = many
    assert many == {"200": 192, "503": 0, "other": 0, "silent_close": 0, "reconnects": 0, "503_without_retry_after": 0}, many
    one = flood(source="127.0.0.1", headers_for=lambda i: b"Forwarded: for=198.51.100.200;proto=http\r\n")
    figures["one_client"] = one
    assert one["silent_close"] == 0 and one["other"] == 0 and one["503_without_retry_after"] == 0, one
    assert one["200"] + one["503"] == 192 and one["200"] > 0, one
    assert one["reconnects"] == 0, f"a refusal closed the proxy's connection: {one}"
    m = metrics()
    figures["trusted_proxy_requests"] = m["substatus_http_trusted_proxy_requests_total"]
    figures["refused_requests_per_client"] = m['substatus_http_requests_refused_total{reason="requests_per_client"}']
    assert m["substatus_http_trusted_proxy_requests_total"] >= 384, m
    assert figures["refused_requests_per_client"] == one["503"], (figures, one)


NGINX_CONF = """
daemon off;
master_process off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 512; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/client_body;
  proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fastcgi;
  uwsgi_temp_path {tmp}/uwsgi;
  scgi_temp_path {tmp}/scgi;
  server {{
    listen unix:{tmp}/nginx.sock;
    # The test's clients all come through one unix socket: each names the address it stands for
    # in X-Test-Client, which nginx takes as the client's ($remote_addr), as if it came over TCP.
    set_real_ip_from unix:;
    real_ip_header X-Test-Client;
    location / {{
      # As in README ("Running behind a reverse proxy").
      proxy_pass http://{upstream};
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto $scheme;
      proxy_request_buffering off;  # so that a slow upload is in flight at substatusd at once
    }}
  }}
}}
"""


def nginx(nginx_bin):
    tmp = tempfile.mkdtemp(prefix="substatus-nginx-")
    with open(f"{tmp}/nginx.conf", "w") as f:
        f.write(NGINX_CONF.format(tmp=tmp, upstream=http_addr))
    proc = subprocess.Popen([nginx_bin, "-p", tmp, "-e", f"{tmp}/error.log", "-c", f"{tmp}/nginx.conf"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(f"{tmp}/nginx.sock"):
            assert proc.poll() is None, f"nginx exited: {proc.stderr.read().decode()}"
            assert time.monotonic() < deadline, "nginx did not listen"
            time.sleep(0.02)
        run_through_nginx(f"{tmp}/nginx.sock")
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def through(path, client, method=b"GET", extra=b"", body=b""):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.sendall(method + b" " + extra + b" HTTP/1.1\r\nHost: substatus.test\r\nX-Test-Client: " + client + b"\r\n" + body)
    return s


def run_through_nginx(path):
    # 40 clients, 3 requests each, at once: all served.
    results = []
    lock = threading.Lock()

    def one(i):
        for _ in range(3):
            s = through(path, b"198.51.100.%d" % (i + 1), extra=b"/healthz", body=b"\r\n")
            answer = read_one(s)
            s.close()
            with lock:
                results.append(answer[0] if answer else None)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    figures["many_clients"] = {str(k): results.count(k) for k in set(results)}
    assert results.count(200) == 120, figures

    # One client holds 24 uploads in flight (head sent, body not): past 16 it gets 503 + Retry-After.
    flooder = b"198.51.100.66"
    held = []
    for _ in range(24):
        held.append(through(path, flooder, method=b"POST", extra=b"/healthz",
                            body=b"Content-Length: 10\r\n\r\n12345"))
    # Poll (bounded) until the refusals have come back through nginx, then a little longer to see
    # that no more come.
    received = {s: b"" for s in held}
    deadline, settled = time.monotonic() + 15, None
    while time.monotonic() < deadline:
        for s in held:
            s.setblocking(False)
            try:
                received[s] += s.recv(65536)
            except (BlockingIOError, ConnectionResetError):
                pass
            s.setblocking(True)
        answered = sum(1 for s in held if parse_responses(received[s]))
        if answered >= 24 - 16 and settled is None:
            settled = time.monotonic() + 0.5
        if settled is not None and time.monotonic() > settled:
            break
        time.sleep(0.02)
    refused = [parse_responses(received[s])[0] for s in held if parse_responses(received[s])]
    figures["flood_refused"] = len(refused)
    assert len(refused) == 24 - 16, figures
    assert all(r[0] == 503 and "retry-after" in r[1] for r in refused), refused
    # Another client through the same nginx is served meanwhile, and an RPC through it names it.
    s = through(path, b"198.51.100.77", extra=b"/healthz", body=b"\r\n")
    answer = read_one(s)
    s.close()
    assert answer is not None and answer[0] == 200, answer
    rpc = b'{"service":""}'
    s = through(path, b"198.51.100.78", method=b"POST", extra=b"/grpc.health.v1.Health/Check",
                body=b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(rpc), rpc))
    answer = read_one(s)
    s.close()
    assert answer is not None and answer[0] == 200, answer
    # The held uploads finish and are answered (405: /healthz is GET only).
    finished = []
    for s in held:
        try:
            s.sendall(b"67890")
        except OSError:
            pass
    for s in held:
        answer = read_one(s, timeout=5)
        finished.append(answer[0] if answer else None)
        s.close()
    figures["flood_finished"] = {str(k): finished.count(k) for k in set(finished)}
    assert finished.count(405) == 16, figures
    m = metrics()
    assert m['substatus_http_requests_refused_total{reason="requests_per_client"}'] == 24 - 16, m
    assert m["substatus_http_trusted_proxy_requests_total"] >= 120 + 24 + 2, m
    print("CLIENTS refused=ipv4:198.51.100.66 rpc=ipv4:198.51.100.78")


if scenario == "framing":
    framing(sys.argv[3])
elif scenario == "well_formed":
    well_formed()
elif scenario == "keepalive_flood":
    keepalive_flood()
elif scenario == "proxied_flood":
    proxied_flood()
elif scenario == "nginx":
    nginx(sys.argv[3])
else:
    sys.exit(f"unknown scenario {scenario}")
print("FIGURES " + json.dumps(figures))
print(f"PASS {scenario}")
