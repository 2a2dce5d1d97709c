# An echo server on a free port of 127.0.0.1 that accepts connections only
# while the file argv[2] exists (until then they wait in its accept queue).
# It logs "start pid=PID port=PORT", then "accepted N" for each connection;
# each line a client sends comes back prefixed with "echo:". With a third
# argument "mptcp" the listener is an MPTCP socket (as Go's since 1.24).
import os, select, socket, sys, time

log, gate = sys.argv[1], sys.argv[2]


def say(line):
    with open(log, "a") as f:
        f.write(line + "\n")


proto = 262 if len(sys.argv) > 3 and sys.argv[3] == "mptcp" else 0  # IPPROTO_MPTCP
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, proto)
s.bind(("127.0.0.1", 0))
s.listen(8)
say("start pid=%d port=%d" % (os.getpid(), s.getsockname()[1]))
conns = []
accepted = 0
while True:
    r, _, _ = select.select([s] + conns, [], [], 0.5)
    for c in r:
        if c is s:
            if not os.path.exists(gate):
                time.sleep(0.01)
                continue
            n, _ = s.accept()
            conns.append(n)
            accepted += 1
            say("accepted %d" % accepted)
            continue
        try:
            d = c.recv(4096)
        except OSError:
            d = b""
        if not d:
            conns.remove(c)
            c.close()
            continue
        c.sendall(b"echo:" + d)
