# A client of a UNIX stream server outside the dump (path argv[2]): it
# sends "tick N" lines every 20 ms and logs each line the server sends as
# "heard LINE". It logs "start pid=PID", then "sent N" every 10 ticks.
import os, select, socket, sys, time

log, path = sys.argv[1], sys.argv[2]


def say(line):
    with open(log, "a") as f:
        f.write(line + "\n")


c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
c.connect(path)
say("start pid=%d" % os.getpid())
n, buf = 0, b""
while True:
    n += 1
    c.sendall(b"tick %d\n" % n)
    if n % 10 == 0:
        say("sent %d" % n)
    r, _, _ = select.select([c], [], [], 0.02)
    if r:
        d = c.recv(4096)
        if not d:
            say("FAIL end of file from the server")
            sys.exit(1)
        buf += d
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            say("heard " + line.decode())
