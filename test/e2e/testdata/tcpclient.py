"""A TCP client for the socket tests: tcpclient.py PORT SECONDS [HOST].

Streams numbered lines with a random payload and checks that every answer
comes back exactly once, in order, with the right checksum, and that the
connection is never reset or stalled for more than 10 s. Retries are off:
a reset fails the test. Prints "ok N PORT" (N answers, its local port).
"""
import hashlib, os, socket, sys, time

s = socket.create_connection((sys.argv[3] if len(sys.argv) > 3 else "127.0.0.1", int(sys.argv[1])))
s.settimeout(10)
port = s.getsockname()[1]
f = s.makefile("rb")
end = time.time() + float(sys.argv[2])
n = 0
try:
    while time.time() < end:
        n += 1
        payload = os.urandom(16 + n % 200).hex().encode()
        s.sendall(b"%d %s\n" % (n, payload))
        want = b"%d %d %s\n" % (n, n, hashlib.sha256(payload).hexdigest().encode())
        got = f.readline()
        if got != want:
            print("FAIL answer %d: %r, want %r" % (n, got, want), flush=True)
            sys.exit(1)
        time.sleep(0.005)
except Exception as e:
    print("FAIL after %d: %r" % (n, e), flush=True)
    sys.exit(1)
if s.getsockname()[1] != port:
    print("FAIL local port changed", flush=True)
    sys.exit(1)
print("ok %d %d" % (n, port), flush=True)
