"""A redis client for the socket tests: rediscli.py PORT FIFO.

Over ONE connection (no reconnects) it loads 1000 keys, prints "loaded ID
PORT", then for every line read from FIFO ("check N") verifies that CLIENT
ID is unchanged, reads every key back, writes 100 new ones and prints
"ok N ID PORT"; at EOF it exits 0. Any error or mismatch is fatal.
"""
import socket, sys, time
def cmd(f, s, *args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    s.sendall(out)
    return read(f)
def read(f):
    line = f.readline()
    t, rest = line[:1], line[1:-2]
    if t in (b"+", b"-"): return rest
    if t == b":": return int(rest)
    if t == b"$":
        n = int(rest)
        if n < 0: return None
        d = f.read(n + 2); return d[:-2]
    if t == b"*":
        return [read(f) for _ in range(int(rest))]
    raise Exception("bad reply %r" % line)
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
f = s.makefile("rb")
cid = cmd(f, s, "CLIENT", "ID"); port = s.getsockname()[1]
for i in range(1000): cmd(f, s, "SET", "k%d" % i, "v%d" % i)
print("loaded", cid, port, flush=True)
total = 1000
for line in open(sys.argv[2]):
    n = int(line.split()[1])
    assert cmd(f, s, "CLIENT", "ID") == cid, "client id changed"
    assert s.getsockname()[1] == port
    for i in range(total):
        got = cmd(f, s, "GET", "k%d" % i)
        assert got == b"v%d" % i, (i, got)
    for i in range(total, total + 100): cmd(f, s, "SET", "k%d" % i, "v%d" % i)
    total += 100
    print("ok", n, cid, port, flush=True)
