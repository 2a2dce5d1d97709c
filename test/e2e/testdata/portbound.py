"""TCP ports bound by the program or chosen by connect: portbound.py LOG TRIGGER.

Three connections to a listener of its own: "bound" from a port of
ip_local_port_range the program bound by number, "bind0" bound with port
0 before connect, "chosen" whose port connect chose. It logs "start",
then waits for the file TRIGGER (made after the restore), resets the
three from their server ends and checks which ports the client sockets
keep once their connections ended (a new socket's bind to the port
fails with EADDRINUSE): "bound" keeps it, the two others gave it back.
It logs PASS or FAIL with what it found.
"""
import errno, os, socket, sys, struct, time

log = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
def say(s): os.write(log, (s + "\n").encode())
lo = "127.0.0.1"
ls = socket.socket(); ls.bind((lo, 0)); ls.listen(8)
t = socket.socket(); t.bind((lo, 0)); eph = t.getsockname()[1]; t.close()
clients = {}
for name in ("bound", "bind0", "chosen"):
    c = socket.socket()
    if name == "bound":
        c.bind((lo, eph))
    elif name == "bind0":
        c.bind((lo, 0))
    c.connect(ls.getsockname())
    s, _ = ls.accept()
    clients[name] = (c, s)
say("start pid=%d" % os.getpid())
deadline = time.time() + 120
while not os.path.exists(sys.argv[2]):
    if time.time() > deadline:
        say("FAIL no trigger"); sys.exit(1)
    time.sleep(0.01)
kept = {}
for name, (c, s) in clients.items():
    port = c.getsockname()[1]
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    c.settimeout(10)
    try:
        c.recv(1)
    except ConnectionResetError:
        pass
    n = socket.socket()
    try:
        n.bind((lo, port))
        kept[name] = False
    except OSError as e:
        if e.errno != errno.EADDRINUSE:
            say("FAIL %s: bind: %s" % (name, e)); sys.exit(1)
        kept[name] = True
    n.close()
want = {"bound": True, "bind0": False, "chosen": False}
say("%s kept %r, want %r" % ("PASS" if kept == want else "FAIL", kept, want))
while True:
    time.sleep(1)
