"""UNIX socketpairs between a parent and its child: unixpair.py LOG.

The parent sends numbered lines on a stream pair and numbered datagrams on
a datagram pair; the child reads them slowly (so data is always queued)
and checks that nothing is lost, repeated, reordered or merged, and answers
on the stream pair, which the parent reads lazily and checks too. Both log
"... ok N" progress lines and "FAIL ..." on any error.
"""
import os, socket, sys, time

log = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
def say(s): os.write(log, (s + "\n").encode())
sp = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
dp = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
pid = os.fork()
if pid == 0:
    s, d = sp[1], dp[1]
    f = s.makefile("rb")
    n = 0
    while True:
        n += 1
        line = f.readline()
        if line != b"s %d\n" % n:
            say("child FAIL stream %d: %r" % (n, line)); sys.exit(1)
        m = d.recv(100)
        if m != b"d %d" % n:
            say("child FAIL datagram %d: %r" % (n, m)); sys.exit(1)
        s.sendall(b"a %d\n" % n)
        if n % 20 == 0:
            say("child ok %d" % n)
        time.sleep(0.012)
s, d = sp[0], dp[0]
s.setblocking(False)
say("start pid=%d child=%d" % (os.getpid(), pid))
n, acks, buf = 0, 0, b""
while True:
    n += 1
    s.sendall(b"s %d\n" % n)
    d.send(b"d %d" % n)
    if n % 10 == 0:  # read the answers only now and then: they queue up
        try:
            buf += s.recv(65536)
        except BlockingIOError:
            pass
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            acks += 1
            if line != b"a %d" % acks:
                say("parent FAIL answer %d: %r" % (acks, line)); sys.exit(1)
        say("parent ok %d" % acks)
    time.sleep(0.01)
