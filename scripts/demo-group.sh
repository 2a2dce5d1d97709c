#!/usr/bin/env bash
# The coordinator layer end to end: a parallel job of 3 processes on 3
# "nodes" (network + PID + mount namespaces, a ckpt agent as PID 1 of
# each), talking over TCP in a ring, is checkpointed with XOR parity, then
# migrated while it runs to 3 other nodes with other addresses; it goes on
# with the same PIDs and the same connections. Run as root: `make demo-group`.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$PWD/bin
id=$((RANDOM % 150 + 50))
net=10.233.$id
work=$(mktemp -d /tmp/ckpt-demo-group.XXXXXX)
sw=ckd${id}sw
nodes=()

cleanup() {
	pkill -KILL -f "ckpt agent --listen unix:$work/" 2>/dev/null || true
	sleep 0.2
	for n in "${nodes[@]}"; do ip netns del "$n" 2>/dev/null || true; done
	ip netns del "$sw" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# node NAME HOST: a node with address $net.HOST and its agent.
node() {
	local ns=ckd${id}$1
	ip netns add "$ns"
	nodes+=("$ns")
	ip link add "v$id$1" netns "$ns" type veth peer name "p$id$1" netns "$sw"
	ip -n "$sw" link set "p$id$1" master br0 up
	ip -n "$ns" addr add "$net.$2/24" dev "v$id$1"
	ip -n "$ns" link set "v$id$1" up
	ip -n "$ns" link set lo up
	mkdir -p "$work/$1"
	setsid ip netns exec "$ns" unshare --pid --fork --mount-proc --kill-child \
		"$bin/ckpt" agent --listen "unix:$work/$1.sock" --root "$work/$1" --data-ip "$net.$2" \
		</dev/null >"$work/$1.agent.log" 2>&1 &
	disown
	until "$bin/ckpt" group kill "999999@unix:$work/$1.sock" 2>/dev/null; do sleep 0.05; done
}

gcc -O2 -o "$work/ringjob" testdata/victims/ringjob.c
ip netns add "$sw"
ip -n "$sw" link add br0 type bridge
ip -n "$sw" link set br0 up

say "3 nodes a0 a1 a2 ($net.1-3), each with its own network, PIDs and /proc, a ckpt agent as PID 1"
for i in 0 1 2; do node "a$i" $((i + 1)); done

say "start the job: 3 processes in a TCP ring passing a token (ckpt group exec)"
members=()
for i in 0 1 2; do
	r=$(((i + 1) % 3 + 1))
	pid=$("$bin/ckpt" group exec --agent "unix:$work/a$i.sock" -- "$work/ringjob" "$work/job$i.log" "$i" 3 \
		"$net.$((i + 1)):5000" "$net.$r:5000" "$work/stop" 20 8)
	members+=("$pid@unix:$work/a$i.sock")
	echo "process $i runs as PID $pid on node a$i"
done
sleep 1.5
for i in 0 1 2; do tail -n 1 "$work/job$i.log"; done

say "group checkpoint with XOR parity: ckpt group checkpoint --parity ${members[*]}"
"$bin/ckpt" group checkpoint --name ck --manifest "$work/ck.json" --parity --block-size 1048576 "${members[@]}"
ls -l "$work"/a*/ck/*/ | grep ckpt

say "3 new nodes b0 b1 b2 ($net.11-13)"
for i in 0 1 2; do node "b$i" $((i + 11)); done
for i in 0 1 2; do echo "$net.$((i + 1)) $net.$((i + 11))"; done >"$work/moves.rules"
echo "rules: $(tr '\n' ';' <"$work/moves.rules")"

say "migrate the running job there: ckpt group migrate --rules moves.rules --to b0 --to b1 --to b2 ..."
"$bin/ckpt" group migrate --rules "$work/moves.rules" --to "unix:$work/b0.sock" --to "unix:$work/b1.sock" \
	--to "unix:$work/b2.sock" "${members[@]}"
sleep 1.5
for i in 0 1 2; do
	tail -n 1 "$work/job$i.log"
done
echo "the same PIDs and the same local ports (lport/rport) go on, now from nodes b0-b2:"
ip netns exec "ckd${id}b0" ss -tn | sed -n 1,3p

say "finish the job: its checksum is the one of an uninterrupted run"
touch "$work/stop"
sleep 1
done_line=$(grep -h '^done' "$work/job0.log")
echo "$done_line"
tail -q -n 1 "$work"/job*.log
# Replay ringjob's mix (64-bit, logical shifts) over every round.
rounds=${done_line#done rounds=}
rounds=${rounds%% *}
sum=0
for ((r = 1; r <= rounds; r++)); do
	for ((i = 0; i < 3; i++)); do
		x=$((sum ^ ((i + 1) * 0x9E3779B97F4A7C15) ^ (r << 17)))
		x=$((x ^ ((x >> 31) & 0x1FFFFFFFF)))
		x=$((x * 0xff51afd7ed558ccd))
		sum=$((x ^ ((x >> 29) & 0x7FFFFFFFF)))
	done
done
want=$(printf '%u' "$sum")
echo "replayed checksum of $rounds uninterrupted rounds: $want"
[ "$done_line" = "done rounds=$rounds sum=$want" ] || { echo "checksum differs: demo FAILED"; exit 1; }
echo "demo OK"
