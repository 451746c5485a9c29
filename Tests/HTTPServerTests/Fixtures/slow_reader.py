"""A slow HTTP/1.1 client for the streamed-body tests, driven line by line on stdin.

Usage: slow_reader.py PORT PATH
Connects with a small receive buffer (4 KiB), sends GET PATH, prints `HEAD <status> <transfer-encoding>`,
then obeys one command per stdin line and prints one line for each:
  read N   reads N body bytes (chunked decoding by http.client): `READ <n>`
  rest     reads the body to its end: `END <bytes read in total> <ok|corrupt>` (each byte i of the body
           must be i % 251, the pattern the tests write)
  close    closes the connection: `CLOSED`
"""
import http.client
import socket
import sys

port, path = int(sys.argv[1]), sys.argv[2]
sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
sock.settimeout(20)
sock.connect(("127.0.0.1", port))
connection = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
connection.sock = sock
connection.request("GET", path)
response = connection.getresponse()
print("HEAD", response.status, response.getheader("Transfer-Encoding", "-"), flush=True)
total = 0
intact = True


PATTERN = bytes(i % 251 for i in range(251)) * (70000 // 251 + 2)


def account(data):
    global total, intact
    for start in range(0, len(data), 65536):
        piece = data[start:start + 65536]
        offset = (total + start) % 251
        if piece != PATTERN[offset:offset + len(piece)]:
            intact = False
    total += len(data)


for line in sys.stdin:
    command = line.split()
    if not command:
        continue
    if command[0] == "read":
        data = response.read(int(command[1]))
        account(data)
        print("READ", len(data), flush=True)
    elif command[0] == "rest":
        while True:
            data = response.read(65536)
            if not data:
                break
            account(data)
        print("END", total, "ok" if intact else "corrupt", flush=True)
    elif command[0] == "close":
        sock.close()
        connection.close()
        print("CLOSED", flush=True)
