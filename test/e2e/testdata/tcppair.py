"""A TCP connection whose both ends are in the dumped tree: tcppair.py LOG [ADDR].

The parent listens on loopback, a child connects; the parent streams
numbered lines, the child answers each, both check the sequence and log
"parent ok N" / "child ok N" (and "addr LOCAL PEER" of the parent's
connection every 20th line); any error logs FAIL.
"""
import os, socket, sys, time

log = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
def say(s): os.write(log, (s + "\n").encode())
ls = socket.socket()
addr = sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1"
ls.bind((addr, 0)); ls.listen(1)
port = ls.getsockname()[1]
if os.fork() == 0:
    ls.close()
    c = socket.socket()
    c.bind((addr, 0))
    c.connect((addr, port))
    f = c.makefile("rb")
    n = 0
    while True:
        n += 1
        line = f.readline()
        if line != b"q %d\n" % n:
            say("child FAIL %d %r" % (n, line)); sys.exit(1)
        c.sendall(b"a %d\n" % n)
        if n % 20 == 0: say("child ok %d" % n)
s, _ = ls.accept()
f = s.makefile("rb")
say("start pid=%d" % os.getpid())
n = 0
while True:
    n += 1
    s.sendall(b"q %d\n" % n)
    line = f.readline()
    if line != b"a %d\n" % n:
        say("parent FAIL %d %r" % (n, line)); sys.exit(1)
    if n % 20 == 0:
        say("addr %s:%d %s:%d" % (s.getsockname() + s.getpeername()))
        say("parent ok %d" % n)
    time.sleep(0.01)
