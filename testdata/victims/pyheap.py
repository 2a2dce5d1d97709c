#!/usr/bin/env python3
"""pyheap: a big Python heap (usage: python3 pyheap.py LOG [MIB]).

Builds about MIB MiB (default 200) of deterministic heap: 90% as a list of
64 KiB bytes objects, the rest as a dict of ints, and keeps its sha256.
Checks that a checkpoint/restore keeps:
  - the whole heap: a check recomputes the sha256 and compares;
  - a counter dict changed at every tick (counts of tick % 97);
  - the signal setup: SIGUSR1/SIGUSR2 handlers (SA_RESTART through
    siginterrupt(False)), SIGHUP blocked, SIGTERM default.
Log protocol as in victim.h: "start pid=PID", "tick N", "check ok N" or
"check FAIL WHAT" after SIGUSR1, "bye N" and exit 0 after SIGUSR2; the log is
opened once with O_APPEND and written with one os.write per line. The heap
is built after the start line, so the first tick comes a second or two later.
"""
import array
import hashlib
import os
import random
import signal
import sys
import time

want_check = want_bye = False


def on_usr1(sig, frame):
    global want_check
    want_check = True


def on_usr2(sig, frame):
    global want_bye
    want_bye = True


def build(mib):
    rng = random.Random(0x5EED)
    blobs = [rng.randbytes(64 << 10) for _ in range(mib * 16 * 9 // 10)]
    ints = {i: (i * 2654435761) % (1 << 61) for i in range(mib * 1024)}
    return blobs, ints


def digest(blobs, ints):
    h = hashlib.sha256()
    for b in blobs:
        h.update(b)
    flat = array.array("q")
    for k, v in ints.items():
        flat.append(k)
        flat.append(v)
    h.update(flat.tobytes())
    return h.hexdigest()


def want_counts(n):
    """The counts dict after ticks 1..n: how many t in 1..n have t % 97 == r."""
    return {r: n // 97 + (1 if 1 <= r <= n % 97 else 0) for r in range(97)}


def check(n, blobs, ints, sha, counts):
    if signal.SIGHUP not in signal.pthread_sigmask(signal.SIG_BLOCK, []):
        return "SIGHUP not blocked"
    if signal.getsignal(signal.SIGUSR1) is not on_usr1 or signal.getsignal(signal.SIGUSR2) is not on_usr2:
        return "handlers"
    if signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        return "SIGTERM not default"
    if counts != want_counts(n):
        return "counter dict"
    got = digest(blobs, ints)
    if got != sha:
        return "heap sha256 %s, want %s" % (got, sha)
    return None


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: pyheap.py LOG [MIB]")
    mib = int(sys.argv[2]) if len(sys.argv) == 3 else 200
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def log(line):
        os.write(fd, (line + "\n").encode())

    for sig, fn in ((signal.SIGUSR1, on_usr1), (signal.SIGUSR2, on_usr2)):
        signal.signal(sig, fn)
        signal.siginterrupt(sig, False)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    log("start pid=%d mib=%d" % (os.getpid(), mib))

    blobs, ints = build(mib)
    sha = digest(blobs, ints)
    counts = dict.fromkeys(range(97), 0)
    global want_check, want_bye
    n = 0
    while True:
        n += 1
        counts[n % 97] += 1
        log("tick %d" % n)
        time.sleep(0.02)
        if want_check:
            want_check = False
            why = check(n, blobs, ints, sha, counts)
            log("check FAIL %s" % why if why else "check ok %d" % n)
        if want_bye:
            log("bye %d" % n)
            sys.exit(0)


if __name__ == "__main__":
    main()
