# A server that hands its accepted TCP connections to a worker process
# over a UNIX socket (SCM_RIGHTS), systemd-style: the acceptor (argv
# LOG GATE) listens on a free port of 127.0.0.1 and passes each
# connection to the worker, which takes what is passed only while the
# file GATE exists (until then the fds wait in flight in the UNIX
# socket's queue) and echoes each line a client sends, prefixed "echo:".
import os, select, socket, sys, time

log, gate = sys.argv[1], sys.argv[2]


def say(line):
    with open(log, "a") as f:
        f.write(line + "\n")


acc, wrk = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(8)
if os.fork() == 0:
    acc.close()
    ls.close()
    conns = []
    while True:
        r, _, _ = select.select([wrk] + conns, [], [], 0.02)
        if wrk in r and not os.path.exists(gate):
            r.remove(wrk)
            time.sleep(0.01)
        for c in r:
            if c is wrk:
                msg, fds, _, _ = socket.recv_fds(wrk, 16, 4)
                for fd in fds:
                    conns.append(socket.socket(fileno=fd))
                say("worker took %d" % len(conns))
                continue
            d = c.recv(4096)
            if not d:
                conns.remove(c)
                c.close()
                continue
            c.sendall(b"echo:" + d)
wrk.close()
say("start pid=%d port=%d" % (os.getpid(), ls.getsockname()[1]))
n = 0
while True:
    c, _ = ls.accept()
    socket.send_fds(acc, [b"c"], [c.fileno()])
    c.close()
    n += 1
    say("passed %d" % n)
