"""Raw TLS probes against our server, for RPCHTTP2TransportTests.

Usage: tls_probe.py PORT CASE CA_FILE. Prints "PASS CASE ..." and exits 0, or raises.
  no_alpn      a TLS client offering no ALPN: the handshake must fail
  http11_alpn  a TLS client offering only http/1.1: the handshake must fail
  stall        sends half a ClientHello, then waits: prints how long until the server closed
  garbage      sends an HTTP/1.1 request instead of a ClientHello: the server must close soon
"""
import socket
import ssl
import sys
import time

port, case, ca_file = int(sys.argv[1]), sys.argv[2], sys.argv[3]


def context(alpn):
    ctx = ssl.create_default_context(cafile=ca_file)
    if alpn:
        ctx.set_alpn_protocols(alpn)
    return ctx


def wait_for_close(sock, limit):
    """Reads until EOF or reset; returns the seconds it took."""
    sock.settimeout(limit)
    start = time.monotonic()
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    return time.monotonic() - start


if case in ("no_alpn", "http11_alpn"):
    ctx = context(None if case == "no_alpn" else ["http/1.1"])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        try:
            with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.recv(1)
        except ssl.SSLError as error:
            # The server answers with the alert RFC 7301 names, then closes.
            assert "no application protocol" in str(error).lower().replace("_", " "), error
            print(f"PASS {case} refused: {error}", flush=True)
        else:
            raise AssertionError("the handshake succeeded without ALPN h2")
elif case == "stall":
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context(["h2"]).wrap_bio(incoming, outgoing, server_hostname="localhost")
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    hello = outgoing.read()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.sendall(hello[: len(hello) // 2])
        print(f"PASS stall closed after {wait_for_close(raw, 30):.3f}", flush=True)
elif case == "garbage":
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n" + b"\x00" * 64)
        elapsed = wait_for_close(raw, 10)
        assert elapsed < 5, elapsed
        print(f"PASS garbage closed after {elapsed:.3f}", flush=True)
else:
    raise SystemExit(f"unknown case {case}")
