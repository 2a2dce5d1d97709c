"""A process that keeps files of its own /proc open: ownproc.py LOG.

It holds /proc/self/task (a directory) and /proc/self/status (a file) open
on fds opened once at start, and every 20 ms lists the directory and reads
the file through them (rewinding). Each "ok N" line says both still describe
this very process: its PID in status, its thread in the listing. The fds
are checked to be the same numbers as at start (fstat on them works).
"""
import os, sys, time

log = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
def say(s): os.write(log, (s + "\n").encode())
task = os.open("/proc/self/task", os.O_RDONLY | os.O_DIRECTORY)
status = os.open("/proc/self/status", os.O_RDONLY)
say("start pid=%d task=%d status=%d" % (os.getpid(), task, status))
n = 0
while True:
    n += 1
    tids = os.listdir(task)
    text = os.pread(status, 4096, 0).decode()
    pid_line = [l for l in text.splitlines() if l.startswith("Pid:")]
    if str(os.getpid()) not in tids or pid_line != ["Pid:\t%d" % os.getpid()]:
        say("FAIL %d: tasks %r, %r" % (n, tids, pid_line)); sys.exit(1)
    if n % 5 == 0:
        say("ok %d" % n)
    time.sleep(0.02)
