"""A TCP echo server for the socket tests: tcpserver.py LOG PORT [ADDR].

Each connection gets its own counter: for every line "N payload" it answers
"N <count> <sha256 of the payload>". It uses an epoll-free thread-less loop
with select, and keeps every client connection open until the client closes.
"""
import hashlib, os, select, socket, sys

log = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((sys.argv[3] if len(sys.argv) > 3 else "127.0.0.1", int(sys.argv[2])))
ls.listen(16)
os.write(log, b"start pid=%d\n" % os.getpid())
conns, bufs, counts = [], {}, {}
while True:
    r, _, _ = select.select([ls] + conns, [], [])
    for s in r:
        if s is ls:
            c, _ = ls.accept()
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conns.append(c); bufs[c] = b""; counts[c] = 0
            continue
        data = s.recv(65536)
        if not data:
            conns.remove(s); s.close(); continue
        bufs[s] += data
        while b"\n" in bufs[s]:
            line, bufs[s] = bufs[s].split(b"\n", 1)
            n, payload = line.split(b" ", 1)
            counts[s] += 1
            s.sendall(b"%s %d %s\n" % (n, counts[s], hashlib.sha256(payload).hexdigest().encode()))
