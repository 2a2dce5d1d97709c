#!/usr/bin/env python3
"""Interleaved A/B of ckpt builds on a memhog victim (one per build), for
machines too noisy for two separate benchmark runs: round after round,
each build dumps (--leave-running) its victim, the victim is killed, and
the same build restores it; the medians of dump total_ns and restore
build_ns are printed, and each restored victim checks its memory.

    make build  # in each worktree
    gcc -O2 -pthread -o /tmp/memhog testdata/victims/memhog.c
    bin/ckpt-reaper exec -- python3 test/bench/ab.py /tmp/memhog ROUNDS MIB THREADS \\
        base=/work/wt-base/bin new=bin
"""
import json, os, shutil, signal, statistics, subprocess, sys, time

hog, rounds, mib, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
variants = [a.split("=", 1) for a in sys.argv[5:]]
base = "/dev/shm/ckpt-ab-%d" % os.getpid()
os.makedirs(base)
pids, res = {}, {n: ([], []) for n, _ in variants}


def lines(n, prefix):
    try:
        return [l for l in open(f"{base}/{n}.log").read().splitlines() if l.startswith(prefix)]
    except FileNotFoundError:
        return []


def wait(cond, secs):
    deadline = time.time() + secs
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return False


def gone(pid):
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    return not os.path.exists(f"/proc/{pid}")


for n, _ in variants:
    p = subprocess.Popen([hog, f"{base}/{n}.log", mib, threads], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pids[n] = p.pid
    if not wait(lambda: lines(n, "ready"), 300):
        sys.exit("victim not ready")
for r in range(-1, rounds):  # round -1 warms up, not counted
    for n, bd in variants:
        img = f"{base}/{n}.img"
        shutil.rmtree(img, ignore_errors=True)
        out = subprocess.run([f"{bd}/ckpt", "dump", "--json", "--dir", img, "--leave-running", str(pids[n])],
                             capture_output=True, check=True)
        d = json.loads(out.stdout)
        os.kill(pids[n], signal.SIGKILL)
        wait(lambda: gone(pids[n]), 60)
        for k in range(50):  # a PID just freed can be briefly in use
            out = subprocess.run([f"{bd}/ckpt-redo", "--json", img], capture_output=True)
            if out.returncode == 0 or b"in use" not in out.stderr:
                break
            time.sleep(0.02)
        if out.returncode:
            sys.exit(out.stderr.decode())
        rr = json.loads(out.stdout)
        if r >= 0:
            res[n][0].append(d["total_ns"] / 1e6)
            res[n][1].append(rr["build_ns"] / 1e6)
# A signal sent the moment ckpt-redo is gone may reach any thread of a
# multi-threaded victim (the leader too may not be back in pause yet).
time.sleep(1)
for n, _ in variants:
    os.kill(pids[n], signal.SIGUSR1)
wait(lambda: all(lines(n, "check") for n, _ in variants), 60)
for n, (dt, rt) in res.items():
    print(f"{n:8s} {mib} MiB {threads} threads: dump median {statistics.median(dt):7.1f} ms, "
          f"restore median {statistics.median(rt):7.1f} ms, {lines(n, 'check')} "
          f"dump={['%.0f' % x for x in dt]} restore={['%.0f' % x for x in rt]}")
    os.kill(pids[n], signal.SIGKILL)
shutil.rmtree(base, ignore_errors=True)
