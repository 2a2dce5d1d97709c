#!/usr/bin/env python3
"""sockets: a process holding sockets of many shapes (usage: python3 sockets.py LOG [PATH|epoll]).

It holds UNIX stream, datagram and seqpacket pairs with data queued; files
in flight on the seqpacket pair (a pipe, a socket it still holds, a
datagram socket only in flight with a message queued); a listener bound to
an abstract name with an accepted connection (data queued) and a
connection waiting in its queue; a UDP socket with a datagram it sent
itself queued. With PATH it also connects to the UNIX socket there (a peer
outside a dump of it); with "epoll" it also has an epoll instance in flight
on a pair of its own (a file that cannot be restored in flight).
A check (SIGUSR1) verifies all of it without changing it: queued data is
peeked; the files in flight are received, used and sent again in the same
order (then ckpt's copies closed), so that a check can come any number of
times.
Log protocol as in victim.h: "start pid=PID", "tick N", "check ok N" or
"check FAIL WHAT" after SIGUSR1, "bye N" and exit 0 after SIGUSR2; the log is
opened once with O_APPEND and written with one os.write per line.
"""
import os
import select
import signal
import socket
import sys
import time

want_check = want_bye = False


def on_usr1(sig, frame):
    global want_check
    want_check = True


def on_usr2(sig, frame):
    global want_bye
    want_bye = True


def make(outside):
    s = {}
    s["a"], s["b"] = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    s["a"].send(b"to b")
    s["b"].send(b"to a")
    s["c"], s["d"] = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    s["c"].send(b"dgram 1")
    s["c"].send(b"dgram 2")
    s["e"], s["f"] = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    r, w = os.pipe()
    socket.send_fds(s["e"], [b"a pipe"], [r, w])
    os.close(r)
    os.close(w)
    s["g"], s["h"] = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    socket.send_fds(s["e"], [b"a socket"], [s["g"].fileno()])
    i, j = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    j.send(b"in flight")
    socket.send_fds(s["e"], [b"only in flight"], [i.fileno()])
    i.close()
    s["j"] = j
    name = "\0ckpt-sockets-%d" % os.getpid()
    s["l"] = socket.socket(socket.AF_UNIX)
    s["l"].bind(name)
    s["l"].listen(4)
    s["cl"] = socket.socket(socket.AF_UNIX)
    s["cl"].connect(name)
    s["srv"], _ = s["l"].accept()
    s["srv"].send(b"accepted")
    s["waiting"] = socket.socket(socket.AF_UNIX)
    s["waiting"].connect(name)
    s["u"] = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s["u"].bind(("127.0.0.1", 0))
    s["u"].sendto(b"udp", s["u"].getsockname())
    if outside == "epoll":
        s["x"], s["y"] = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        ep = select.epoll()
        socket.send_fds(s["x"], [b"epoll"], [ep.fileno()])
        ep.close()
    elif outside:
        s["o"] = socket.socket(socket.AF_UNIX)
        s["o"].connect(outside)
    return s, name


def peek(sock, want, what):
    try:
        got = sock.recv(64, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except OSError as e:
        return "%s: %s" % (what, e)
    return None if got == want else "%s: peeked %r, want %r" % (what, got, want)


def in_flight(s):
    """Receives the three messages in flight, uses their files, sends them back."""
    got = []
    for _ in range(3):
        msg, fds, _, _ = socket.recv_fds(s["f"], 64, 4, socket.MSG_DONTWAIT)
        got.append((msg, fds))
    try:
        want = [(b"a pipe", 2), (b"a socket", 1), (b"only in flight", 1)]
        if [(m, len(f)) for m, f in got] != want:
            return "in flight: %r, want %r" % ([(m, len(f)) for m, f in got], want)
        (_, (r, w)), (_, (g,)), (_, (i,)) = got
        os.write(w, b"p")
        if os.read(r, 1) != b"p":
            return "in flight: the pipe"
        os.write(g, b"g")
        if s["h"].recv(1) != b"g":
            return "in flight: the held socket"
        isock = socket.socket(fileno=os.dup(i))
        why = peek(isock, b"in flight", "in flight: the socket only in flight")
        isock.close()
        return why
    finally:
        for msg, fds in got:
            socket.send_fds(s["e"], [msg], fds)
        for _, fds in got:
            for fd in fds:
                os.close(fd)


def check(s, name):
    for sock, want, what in (
        (s["b"], b"to b", "stream pair b"),
        (s["a"], b"to a", "stream pair a"),
        (s["d"], b"dgram 1", "datagram pair"),
        (s["cl"], b"accepted", "accepted connection's client"),
        (s["u"], b"udp", "UDP socket"),
    ):
        why = peek(sock, want, what)
        if why:
            return why
    if s["l"].getsockname() != name.encode() and s["l"].getsockname() != name:
        return "listener name %r" % s["l"].getsockname()
    if select.select([s["l"]], [], [], 0)[0] != [s["l"]]:
        return "listener: no connection waiting"
    return in_flight(s)


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: sockets.py LOG [PATH|epoll]")
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def log(line):
        os.write(fd, (line + "\n").encode())

    for sig, fn in ((signal.SIGUSR1, on_usr1), (signal.SIGUSR2, on_usr2)):
        signal.signal(sig, fn)
        signal.siginterrupt(sig, False)
    s, name = make(sys.argv[2] if len(sys.argv) == 3 else None)
    log("start pid=%d" % os.getpid())
    global want_check, want_bye
    n = 0
    while True:
        n += 1
        log("tick %d" % n)
        time.sleep(0.02)
        if want_check:
            want_check = False
            try:
                why = check(s, name)
            except OSError as e:
                why = "%r" % e
            log("check FAIL %s" % why if why else "check ok %d" % n)
        if want_bye:
            log("bye %d" % n)
            sys.exit(0)


if __name__ == "__main__":
    main()
