# A UNIX stream server whose clients are its own children, and which
# accepts only once the file argv[2] exists: until then their connections
# wait in its accept queue, with the requests they sent. Clients 0..2
# send "req N" and wait for the answer; client 3 sends "bye" and exits
# (its end closed). The server logs "start pid=PID", "ready" once every
# client has sent, then for each connection accepted "served LINE" (and
# answers "echo:LINE") or "eof LINE" when the client had closed; each
# waiting client logs "client N got ANSWER".
import os, socket, sys, time

log, gate = sys.argv[1], sys.argv[2]
path = os.path.join(os.path.dirname(os.path.abspath(log)), "srv.sock")


def say(line):
    with open(log, "a") as f:
        f.write(line + "\n")


say("start pid=%d" % os.getpid())
s = socket.socket(socket.AF_UNIX)
s.bind(path)
s.listen(8)
r, w = os.pipe()
kids = []
for i in range(4):
    pid = os.fork()
    if pid == 0:
        os.close(r)
        c = socket.socket(socket.AF_UNIX)
        c.connect(path)
        c.sendall(b"bye\n" if i == 3 else b"req %d\n" % i)
        os.write(w, b"x")
        if i == 3:
            os._exit(0)
        got = b""
        while not got.endswith(b"\n"):
            d = c.recv(64)
            if not d:
                break
            got += d
        say("client %d got %s" % (i, got.decode().strip()))
        os._exit(0)
    kids.append(pid)
    os.read(r, 1)  # in the queue in this order
os.close(w)
os.waitpid(kids[3], 0)
say("ready")
while not os.path.exists(gate):
    time.sleep(0.01)
for _ in range(4):
    n, _ = s.accept()
    line = b""
    while not line.endswith(b"\n"):
        d = n.recv(64)
        if not d:
            break
        line += d
    line = line.decode().strip()
    if line == "bye":
        say("eof %s" % line if n.recv(64) == b"" else "FAIL: no end of file after %s" % line)
    else:
        n.sendall(b"echo:" + line.encode() + b"\n")
        say("served %s" % line)
    n.close()
for k in kids[:3]:
    os.waitpid(k, 0)
say("done")
while True:
    time.sleep(1)
