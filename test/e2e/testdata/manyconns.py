"""An epoll echo server holding many connections: manyconns.py LOG PORT."""
import os, select, socket, sys

log = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", int(sys.argv[2])))
ls.listen(1024)
ep = select.epoll()
ep.register(ls.fileno(), select.EPOLLIN)
conns = {}
os.write(log, b"start pid=%d\n" % os.getpid())
while True:
    for fd, ev in ep.poll():
        if fd == ls.fileno():
            c, _ = ls.accept()
            conns[c.fileno()] = c
            ep.register(c.fileno(), select.EPOLLIN)
            if len(conns) % 100 == 0:
                os.write(log, b"conns %d\n" % len(conns))
            continue
        c = conns[fd]
        d = c.recv(65536)
        if not d:
            ep.unregister(fd); del conns[fd]; c.close(); continue
        c.sendall(d)
