"""Misbehaving HTTP/2 peers for RPCHTTP2TransportTests (raw sockets and the `h2` library).

Usage: h2_attacks.py PORT CASE [ARG]. Each case misbehaves, checks what the server did where that is
observable, closes its sockets and prints "DONE CASE". The Swift test then checks that the server
still serves other clients and that its descriptors are back to the baseline.
"""
import collections
import select
import socket
import struct
import sys
import time

import h2.config
import h2.connection
import h2.events
import h2.settings

port, case = int(sys.argv[1]), sys.argv[2]
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def connect():
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def frame(kind, flags, stream, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def read_until_closed(s, limit=10.0):
    """Reads until EOF or reset; returns the bytes read. Fails if the server keeps it open."""
    s.settimeout(limit)
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return data
            data += chunk
    except (ConnectionResetError, BrokenPipeError):
        return data
    except socket.timeout:
        raise AssertionError("the server kept the connection open")


def h2_client(window=65535):
    s = connect()
    config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
    conn = h2.connection.H2Connection(config=config)
    conn.initiate_connection()
    if window != 65535:
        conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        conn.increment_flow_control_window(window - 65535)
    s.sendall(conn.data_to_send())
    return s, conn


def grpc_headers(path="/interop.Test/Echo", extra=()):
    return [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "localhost"),
            ("content-type", "application/grpc"), ("te", "trailers")] + list(extra)


def grpc_body(payload):
    return b"\x00" + struct.pack(">I", len(payload)) + payload


def collect(s, conn, until, limit=10.0):
    """Feeds server bytes to `conn` until `until(events)` is true; returns all events."""
    events = []
    deadline = time.monotonic() + limit
    s.settimeout(limit)
    while not until(events):
        assert time.monotonic() < deadline, f"timed out; events so far: {events}"
        data = s.recv(65536)
        if not data:
            break
        events += conn.receive_data(data)
        out = conn.data_to_send()
        if out:
            s.sendall(out)
    return events


if case == "garbage_preface":
    s = connect()
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(range(256)) * 4)
    read_until_closed(s)
    s.close()
elif case == "truncated_frames":
    for cut in (3, 30, 60):
        s = connect()
        data = PREFACE + frame(4, 0, 0, b"") + frame(1, 0x5, 1, b"\x82" * 40)  # HEADERS
        s.sendall(data[: len(PREFACE) + cut] if cut < 9 else data[: len(PREFACE) + 9 + cut])
        time.sleep(0.05)
        s.close()
    # A frame header that announces more than it sends, then the peer goes away.
    s = connect()
    s.sendall(PREFACE + frame(4, 0, 0, b"") + struct.pack(">I", 16000)[1:] + bytes([0, 0]) + struct.pack(">I", 1) + b"x" * 100)
    s.close()
elif case == "oversized_headers":
    s, conn = h2_client()
    conn.send_headers(1, grpc_headers(extra=[("x-big", "a" * 100_000)]), end_stream=False)
    s.sendall(conn.data_to_send())
    events = collect(s, conn, lambda ev: any(isinstance(e, (h2.events.StreamReset, h2.events.ConnectionTerminated)) for e in ev))
    # The connection stays usable when only the stream was reset.
    if not any(isinstance(e, h2.events.ConnectionTerminated) for e in events):
        conn.send_headers(3, grpc_headers(), end_stream=False)
        conn.send_data(3, grpc_body(b"ok"), end_stream=True)
        s.sendall(conn.data_to_send())
        events = collect(s, conn, lambda ev: any(isinstance(e, h2.events.StreamEnded) and e.stream_id == 3 for e in ev))
        trailers = [dict(e.headers) for e in events if isinstance(e, h2.events.TrailersReceived)]
        assert trailers and trailers[0].get("grpc-status") == "0", events
    s.close()
elif case == "continuation_flood":
    s = connect()
    s.sendall(PREFACE + frame(4, 0, 0, b""))
    # HEADERS without END_HEADERS, then endless CONTINUATION frames of literal headers.
    literal = b"\x40\x05x-abc\x7f\x81\x07" + b"a" * 1000 + b"\x00" * 0
    s.sendall(frame(1, 0x1, 1, b"\x83\x86\x84"))
    try:
        for _ in range(20000):
            s.sendall(frame(9, 0, 1, literal[:900]))
    except (BrokenPipeError, ConnectionResetError):
        pass
    read_until_closed(s)
    s.close()
elif case == "rapid_reset":
    s, conn = h2_client()
    stream = 1
    try:
        for i in range(3000):
            conn.send_headers(stream, grpc_headers(), end_stream=False)
            conn.reset_stream(stream)
            stream += 2
            if i % 100 == 0:
                s.sendall(conn.data_to_send())
        s.sendall(conn.data_to_send())
    except (BrokenPipeError, ConnectionResetError):
        pass
    s.close()
elif case == "ping_flood":
    s = connect()
    s.sendall(PREFACE + frame(4, 0, 0, b""))
    try:
        for i in range(20000):
            s.sendall(frame(6, 0, 0, struct.pack(">Q", i)))
    except (BrokenPipeError, ConnectionResetError):
        pass
    data = read_until_closed(s)
    s.close()
elif case == "slow_reader":
    # Asks for 16 x 1 MiB with large windows and never reads until stdin closes; the Swift test
    # meanwhile checks that other clients are served.
    s, conn = h2_client(window=64 << 20)
    for i in range(16):
        sid = 1 + 2 * i
        conn.send_headers(sid, grpc_headers("/interop.Test/Big"), end_stream=False)
        conn.send_data(sid, grpc_body(str(1 << 20).encode()), end_stream=True)
    s.sendall(conn.data_to_send())
    print("READY", flush=True)
    sys.stdin.read()
    s.close()
elif case == "partial_messages":
    # 256 streams each announce a message of ARG bytes and send all but its last byte, within the
    # flow-control windows; a stream the server answers (a status) or resets gets no more. Prints
    # "READY" and the statuses by count, then holds the connection until stdin closes.
    length = int(sys.argv[3])
    s, conn = h2_client()
    statuses = {}

    def read_events(timeout):
        readable, _, _ = select.select([s], [], [], timeout)
        if not readable:
            return False
        data = s.recv(1 << 20)
        assert data, "the server closed the connection"
        for e in conn.receive_data(data):
            if isinstance(e, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                status = dict(e.headers).get("grpc-status")
                if status is not None:
                    statuses[e.stream_id] = status
            elif isinstance(e, h2.events.StreamReset):
                statuses[e.stream_id] = f"reset{int(e.error_code)}"
        out = conn.data_to_send()
        if out:
            s.sendall(out)
        return True

    body = b"\x00" + struct.pack(">I", length) + bytes(length - 1)
    for i in range(256):
        sid = 1 + 2 * i
        conn.send_headers(sid, grpc_headers(), end_stream=False)
        s.sendall(conn.data_to_send())
        offset = 0
        while offset < len(body) and sid not in statuses:
            room = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size, len(body) - offset)
            if room == 0:
                assert read_events(10), "no WINDOW_UPDATE from the server"
                continue
            conn.send_data(sid, body[offset:offset + room])
            offset += room
            s.sendall(conn.data_to_send())
            read_events(0)
    while read_events(0.3):
        pass
    counts = collections.Counter(statuses.values())
    print("READY", " ".join(f"{k}={v}" for k, v in sorted(counts.items())), flush=True)
    sys.stdin.read()
    s.close()
elif case == "closed_window":
    # Asks for a 1 MiB reply with the default 64 KiB window, reads what comes and never opens the
    # window: the server must close the connection (write timeout).
    s, conn = h2_client()
    conn.send_headers(1, grpc_headers("/interop.Test/Big"), end_stream=False)
    conn.send_data(1, grpc_body(str(1 << 20).encode()), end_stream=True)
    s.sendall(conn.data_to_send())
    print("READY", flush=True)
    read_until_closed(s, limit=10)
    s.close()
elif case == "paused_watcher":
    # A watcher that reads its stream's first window and pauses, on a connection whose own window
    # is wide open: the server must hold the stream back (its handler waits for room), keep
    # serving other calls on the connection, and after the write timeout reset only that stream.
    s, conn = h2_client()
    conn.increment_flow_control_window(16 << 20)
    conn.send_headers(1, grpc_headers("/interop.Test/Watch"), end_stream=False)
    conn.send_data(1, grpc_body(b""), end_stream=True)
    s.sendall(conn.data_to_send())
    collect(s, conn, lambda events: sum(len(e.data) for e in events
                                        if isinstance(e, h2.events.DataReceived) and e.stream_id == 1) >= 65535)
    print("READY", flush=True)

    def echo(stream_id):
        conn.send_headers(stream_id, grpc_headers(), end_stream=False)
        conn.send_data(stream_id, grpc_body(b"hi"), end_stream=True)
        s.sendall(conn.data_to_send())
        events = collect(s, conn, lambda events: any(
            isinstance(e, h2.events.StreamEnded) and e.stream_id == stream_id for e in events))
        assert any(isinstance(e, h2.events.DataReceived) and e.stream_id == stream_id for e in events), events

    echo(3)
    print("ECHO", flush=True)
    events = collect(s, conn, lambda events: any(
        isinstance(e, h2.events.StreamReset) and e.stream_id == 1 for e in events), limit=20)
    assert not any(isinstance(e, h2.events.ConnectionTerminated) for e in events), events
    echo(5)
    print("RESET", flush=True)
    sys.stdin.read()
    s.close()
elif case == "held_reply_reset":
    # Asks for a 1 MiB reply with the default 64 KiB window and never opens it: the server holds
    # the rest of the reply ("READY"). On a line from stdin, resets the stream and checks that the
    # connection still answers a PING; then stays open until stdin closes.
    s, conn = h2_client()
    conn.send_headers(1, grpc_headers("/interop.Test/Big"), end_stream=False)
    conn.send_data(1, grpc_body(str(1 << 20).encode()), end_stream=True)
    s.sendall(conn.data_to_send())
    collect(s, conn, lambda events: sum(len(e.data) for e in events if isinstance(e, h2.events.DataReceived)) >= 65535)
    print("READY", flush=True)
    sys.stdin.readline()
    conn.reset_stream(1, error_code=8)  # CANCEL
    conn.ping(b"afterrst")
    s.sendall(conn.data_to_send())
    collect(s, conn, lambda events: any(isinstance(e, h2.events.PingAckReceived) for e in events))
    sys.stdin.read()
    s.close()
elif case == "half_open":
    # Connections that connect and send nothing, or only part of the preface, and stay open: the
    # server must close them (handshake timeout).
    sockets = [connect() for _ in range(5)]
    sockets[0].sendall(PREFACE[:10])
    for s in sockets:
        read_until_closed(s, limit=10)
        s.close()
elif case in ("no_ping_ack", "expect_goaway"):
    # Completes the handshake (a PING answered proves the server has read it: then "READY"), then
    # never answers: keepalive (no PING ACK) or idle/age limits must close the connection; for
    # expect_goaway a GOAWAY frame must come first.
    s = connect()
    s.sendall(PREFACE + frame(4, 0, 0, b"") + frame(6, 0, 0, b"handshak"))
    data = b""
    s.settimeout(10)
    while b"handshak" not in data:
        chunk = s.recv(65536)
        assert chunk, "closed before the handshake"
        data += chunk
    print("READY", flush=True)
    data += read_until_closed(s, limit=10)
    kinds = []
    while len(data) >= 9:
        length = int.from_bytes(data[:3], "big")
        kinds.append(data[3])
        data = data[9 + length:]
    if case == "no_ping_ack":
        assert 6 in kinds, f"no PING before close: {kinds}"
    else:
        assert 7 in kinds, f"no GOAWAY before close: {kinds}"
    s.close()
elif case == "connection_limit":
    # The server allows 2 connections. A third one makes room: the connection idle the longest
    # gets GOAWAY (max_connections) and is closed; the other one stays open, the third is served.
    first = [connect() for _ in range(2)]
    for s in first:
        s.sendall(PREFACE + frame(4, 0, 0, b""))
        time.sleep(0.1)
    third = connect()
    third.sendall(PREFACE + frame(4, 0, 0, b""))
    evicted = read_until_closed(first[0], limit=5)
    assert b"max_connections" in evicted, evicted
    for s in (first[1], third):
        s.settimeout(0.5)
        try:
            while True:
                assert s.recv(65536) != b"", "an allowed connection was closed"
        except socket.timeout:
            pass
    for s in first + [third]:
        s.close()
elif case == "connection_limit_busy":
    # The server allows 2 connections, both with a call open: a third waits in the backlog (not
    # accepted, not closed) until one of them closes, then it is served.
    busy = []
    for _ in range(2):
        s, conn = h2_client()
        conn.send_headers(1, grpc_headers("/interop.Test/Sleep"))
        s.sendall(conn.data_to_send())
        busy.append(s)
    time.sleep(0.2)
    third, conn = h2_client()
    third.settimeout(0.5)
    try:
        data = third.recv(65536)
        raise AssertionError(f"the server answered a connection over the cap: {data!r}")
    except socket.timeout:
        pass
    busy[0].close()
    third.settimeout(5)
    assert third.recv(65536) != b"", "the waiting connection was not served after a slot freed"
    for s in busy[1:] + [third]:
        s.close()
else:
    raise SystemExit(f"unknown case {case}")
print(f"DONE {case}", flush=True)
