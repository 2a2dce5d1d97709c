#!/usr/bin/env bash
# The main job end to end: start a program, checkpoint it (killing it),
# restore it under the same PID, and watch it continue where it stopped.
# Run through `make demo`, which runs this under ckpt-reaper (a child
# subreaper: PID 1 on these machines does not reap zombies).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$PWD/bin
# Only stdin, stdout and stderr go to the program: an fd leaked from the
# caller (a pipe to some other process) could not be restored.
for fd in $(ls /proc/$$/fd); do
	[ "$fd" -gt 2 ] && eval "exec $fd>&-" 2>/dev/null || true
done
work=$(mktemp -d /tmp/ckpt-demo.XXXXXX)
trap 'rm -rf "$work"' EXIT
gcc -O1 -o "$work/counter" testdata/victims/dynamic_counter.c

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "start a program that counts, checks its own memory and keeps data in a pipe"
setsid "$work/counter" "$work/log" </dev/null >/dev/null 2>&1 &
pid=$!
sleep 1
tail -n 3 "$work/log"

say "checkpoint it: ckpt dump --dir $work/img $pid (the process is killed)"
"$bin/ckpt" dump --dir "$work/img" "$pid"
sleep 0.5
echo "is $pid alive? $(kill -0 "$pid" 2>/dev/null && echo yes || echo no)"
last=$(grep '^tick' "$work/log" | tail -n 1)
echo "last line before the checkpoint: $last"

say "what the image holds: ckpt show"
"$bin/ckpt" show "$work/img" >"$work/show.txt"
head -n 12 "$work/show.txt"

say "restore it: ckpt-redo $work/img"
"$bin/ckpt-redo" "$work/img"
sleep 1
echo "is $pid alive? $(kill -0 "$pid" 2>/dev/null && echo yes || echo no) — $(cat /proc/$pid/comm)"
grep -A 3 -F "$last" "$work/log" | head -n 4

say "ask it to verify its own memory, pipe contents and signal state (SIGUSR1)"
kill -USR1 "$pid"
sleep 0.3
grep '^check' "$work/log" | tail -n 1

say "stop it cleanly (SIGUSR2)"
kill -USR2 "$pid"
sleep 0.3
tail -n 1 "$work/log"
gaps=$(awk '/^tick/{n=$2; if (p && n!=p+1) print p" -> "n; p=n}' "$work/log")
if [ -z "$gaps" ] && grep -q '^check ok' "$work/log"; then
	echo "the counter went on without a gap or a repeat: demo OK"
else
	echo "demo FAILED: gaps: $gaps"; exit 1
fi
