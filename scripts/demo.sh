#!/usr/bin/env bash
# The main job end to end: start a program, checkpoint it (killing it),
# restore it under the same PID, and watch it continue where it stopped.
# Run through `make demo`, which runs this under ckpt-reaper (a child
# subreaper: PID 1 on these machines does not reap zombies).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${CKPT_BIN:-$PWD/bin}
# Only stdin, stdout and stderr go to the program: an fd leaked from the
# caller (a pipe to some other process) could not be restored.
for fd in $(ls /proc/$$/fd); do
	[ "$fd" -gt 2 ] && eval "exec $fd>&-" 2>/dev/null || true
done
work=$(mktemp -d /tmp/ckpt-demo.XXXXXX)
trap 'rm -rf "$work"' EXIT
gcc -O1 -o "$work/counter" testdata/victims/dynamic_counter.c

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
# ticks prints how many tick lines the log holds; has_ticks N: at least N.
ticks() { grep -c '^tick' "$work/log" 2>/dev/null || true; }
has_ticks() { [ "$(ticks)" -ge "$1" ]; }
# wait_for CMD...: run CMD until it succeeds (10 s at most).
wait_for() {
	for _ in $(seq 200); do "$@" && return 0; sleep 0.05; done
	echo "demo FAILED: timed out waiting for: $*"; exit 1
}

say "start a program that counts, checks its own memory and keeps data in a pipe"
# In its own session (setsid), started from a subshell that exits at once,
# so that the counter's parent is ckpt-reaper, not this shell: the shell
# would report the kill of its own job as "Killed" when ckpt dump ends it.
pid=$(setsid "$work/counter" "$work/log" </dev/null >/dev/null 2>&1 & echo $!)
wait_for has_ticks 20
tail -n 3 "$work/log"

say "checkpoint it: ckpt dump --dir $work/img $pid (the process is killed)"
"$bin/ckpt" dump --dir "$work/img" "$pid"
gone() { ! kill -0 "$pid" 2>/dev/null; }
wait_for gone
echo "is $pid alive? $(kill -0 "$pid" 2>/dev/null && echo yes || echo no)"
last=$(grep '^tick' "$work/log" | tail -n 1)
echo "last line before the checkpoint: $last"

say "what the image holds: ckpt show"
"$bin/ckpt" show "$work/img" >"$work/show.txt"
head -n 12 "$work/show.txt"

say "restore it: ckpt-redo $work/img"
"$bin/ckpt-redo" "$work/img"
n=$(ticks)
wait_for has_ticks $((n + 3))
echo "is $pid alive? $(kill -0 "$pid" 2>/dev/null && echo yes || echo no) — $(cat /proc/$pid/comm)"
grep -A 3 -F "$last" "$work/log" | head -n 4

say "ask it to verify its own memory, pipe contents and signal state (SIGUSR1)"
kill -USR1 "$pid"
wait_for grep -q '^check' "$work/log"
grep '^check' "$work/log" | tail -n 1

say "stop it cleanly (SIGUSR2)"
kill -USR2 "$pid"
wait_for grep -q '^bye' "$work/log"
tail -n 1 "$work/log"
gaps=$(awk '/^tick/{n=$2; if (p && n!=p+1) print p" -> "n; p=n}' "$work/log")
if [ -z "$gaps" ] && grep -q '^check ok' "$work/log"; then
	echo "the counter went on without a gap or a repeat: demo OK"
else
	echo "demo FAILED: gaps: $gaps"; exit 1
fi
