"""Listening UNIX sockets for the socket tests: unixlisten.py LOG PATH NAME.

Listens on the filesystem path PATH and on the abstract name NAME; every
client gets "hello N\\n" (N counts clients across both) and is closed
("closed N" in LOG).
"""
import os, select, socket, sys

log = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
a = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
a.bind(sys.argv[2]); a.listen(8)
b = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
b.bind("\0" + sys.argv[3]); b.listen(8)
os.write(log, b"start pid=%d\n" % os.getpid())
n = 0
while True:
    r, _, _ = select.select([a, b], [], [])
    for s in r:
        c, _ = s.accept()
        n += 1
        c.sendall(b"hello %d\n" % n)
        c.close()
        os.write(log, b"closed %d\n" % n)
