#!/usr/bin/env python3
"""A misbehaving HTTP/1.1 receiver for OutboundHTTPTests, on port 0.

Usage: receiver.py [--tls CERT KEY] [--host HOST]
Prints `PORT <n>` once listening, then one line per event:
  OPEN <id>            a connection was accepted
  REQUEST <id> <method> <path> <body-bytes>
  CLOSED <id> <bytes-sent>   the connection ended (the client closed it, or it broke)
Behaviour by path:
  /ok            200 with a small body, keep-alive
  /status/<n>    that status, keep-alive
  /trickle       200, chunked, one byte a second forever
  /endless       200, chunked, 64 KiB chunks as fast as the client reads
  /huge-length   200 with Content-Length: 1 GB, then 64 KiB of body and silence
  /sized/<n>     200 with a body of n bytes
  /redirect      302 to /ok
Ends when stdin closes.
"""
import socket, ssl, sys, threading, time

lock = threading.Lock()


def say(line):
    with lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def read_request(f):
    line = f.readline()
    if not line:
        return None
    method, path, _ = line.decode("latin-1").split(" ", 2)
    length = 0
    chunked = False
    while True:
        h = f.readline()
        if h in (b"\r\n", b"\n", b""):
            break
        name, _, value = h.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
        if name.strip().lower() == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
    body = f.read(length) if length else b""
    return method, path, body


def serve(conn, cid):
    sent = 0
    try:
        f = conn.makefile("rb")
        while True:
            request = read_request(f)
            if request is None:
                break
            method, path, body = request
            say("REQUEST %d %s %s %d" % (cid, method, path, len(body)))
            if path == "/ok":
                payload = b"ok"
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n" + payload)
                sent += 2
            elif path.startswith("/status/"):
                code = int(path.split("/")[2])
                conn.sendall(b"HTTP/1.1 %d X\r\nContent-Length: 0\r\n\r\n" % code)
            elif path.startswith("/sized/"):
                n = int(path.split("/")[2])
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % n + b"x" * n)
                sent += n
            elif path == "/redirect":
                conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: /ok\r\nContent-Length: 0\r\n\r\n")
            elif path == "/trickle":
                conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                while True:
                    conn.sendall(b"1\r\nx\r\n")
                    sent += 1
                    time.sleep(1)
            elif path == "/endless":
                conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                chunk = b"%x\r\n" % 65536 + b"y" * 65536 + b"\r\n"
                while True:
                    conn.sendall(chunk)
                    sent += 65536
            elif path == "/huge-length":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\n\r\n")
                conn.sendall(b"z" * 65536)
                sent += 65536
                while True:
                    time.sleep(1)
                    conn.sendall(b"z")
                    sent += 1
            else:
                conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
    except (OSError, ValueError):
        pass
    finally:
        say("CLOSED %d %d" % (cid, sent))
        try:
            conn.close()
        except OSError:
            pass


def main():
    args = sys.argv[1:]
    context = None
    host = "127.0.0.1"
    while args:
        if args[0] == "--tls":
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(args[1], args[2])
            args = args[3:]
        elif args[0] == "--host":
            host = args[1]
            args = args[2:]
        else:
            args = args[1:]
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, 0))
    listener.listen(128)
    say("PORT %d" % listener.getsockname()[1])

    def accept():
        cid = 0
        while True:
            conn, _ = listener.accept()
            cid += 1
            say("OPEN %d" % cid)

            def run(conn=conn, cid=cid):
                if context is not None:
                    try:
                        conn = context.wrap_socket(conn, server_side=True)
                    except (OSError, ssl.SSLError):
                        say("CLOSED %d 0" % cid)
                        return
                serve(conn, cid)

            threading.Thread(target=run, daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    sys.stdin.read()


main()
