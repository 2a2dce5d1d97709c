"""A TCP server holding connections in mixed states: mixedconns.py LOG PORT.

Connection number i (in accept order) is kept by kind i % 4:
  0  echoed: ESTABLISHED, what the client sends comes back;
  1  unread: ESTABLISHED, never read (the client's bytes stay queued);
  2  half-closed by the server (shutdown SHUT_WR): FIN_WAIT2 once acked;
  3  half-closed by the client: CLOSE_WAIT, its end of file never read.
Logs "start pid=PID", then "conns N" every 100 connections.
"""
import os, select, socket, sys

log = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", int(sys.argv[2])))
ls.listen(1024)
ep = select.epoll()
ep.register(ls.fileno(), select.EPOLLIN)
conns, n = {}, 0
os.write(log, b"start pid=%d\n" % os.getpid())
while True:
    for fd, ev in ep.poll():
        if fd == ls.fileno():
            c, _ = ls.accept()
            conns[c.fileno()] = c
            kind = n % 4
            n += 1
            if kind == 0:
                ep.register(c.fileno(), select.EPOLLIN)
            elif kind == 2:
                c.shutdown(socket.SHUT_WR)
            if n % 100 == 0:
                os.write(log, b"conns %d\n" % n)
            continue
        c = conns[fd]
        d = c.recv(65536)
        if not d:
            ep.unregister(fd)
            continue
        c.sendall(d)
