#!/bin/bash
# job.sh: a batch job script whose MPI job outlives its allocation's time
# limit. Submit it with a warning signal before the limit (Slurm:
# `sbatch --signal=B:USR1@120 --requeue job.sh`); when the signal comes it
# checkpoints the whole job (every node, with parity) and stops, and the
# next allocation (the requeued job) restarts the job from that checkpoint
# instead of from the beginning.
#
# The nodes run a ckpt agent each (`ckpt agent`, see the README), and MPICH
# reaches them through testdata/launch-in-node (hydra's ssh hook), which
# records every started proxy in $CKPT_MEMBERS so that this script knows
# the members to checkpoint.
#
# Environment:
#   CKPT_STATE     directory on storage every allocation sees: the
#                  checkpoint's manifest, the job's exit status
#   LAUNCHER_AGENT the ckpt agent of the node that runs mpiexec
#   CKPT_NODES     file of "HOSTNAME AGENT" lines (launch-in-node's map)
#   CKPT           the ckpt executable (default: ckpt)
#   JOB            the job's command line, run by sh on the launcher's node
#                  (e.g. "mpiexec.hydra -launcher ssh -launcher-exec
#                  .../launch-in-node -hosts n1,n2,n3 -n 3 ./solver")
#   CKPT_PARITY    if not empty (default), the checkpoint keeps XOR parity
#                  (it needs 3 members or more)
#
# Exit status: the job's, once it has finished; 99 when it was checkpointed
# at the warning signal (requeue it).
set -u
ckpt=${CKPT:-ckpt}
manifest=$CKPT_STATE/job.ckpt.json
export CKPT_MEMBERS=$CKPT_STATE/members
status=$CKPT_STATE/exit-status
log() { echo "job.sh: $*" >&2; }

members() {
	# The launcher's shell, then every proxy launch-in-node started.
	echo "$(cat "$CKPT_STATE/leader")@$LAUNCHER_AGENT"
	awk '{ print $2 "@" $3 }' "$CKPT_MEMBERS"
}

checkpoint() {
	log "warning signal: checkpointing the job"
	parity=--parity
	[ -n "${CKPT_PARITY-1}" ] || parity=
	# shellcheck disable=SC2046
	if "$ckpt" group checkpoint --kill $parity --name job --manifest "$manifest.new" $(members); then
		mv "$manifest.new" "$manifest"
		log "checkpointed: $manifest; requeue me"
		exit 99
	fi
	log "checkpoint failed: the job goes on (its last checkpoint, if any, stays)"
}
trap checkpoint USR1

if [ -e "$manifest" ]; then
	log "restarting the job from $manifest"
	"$ckpt" group restore --manifest "$manifest" || exit 1
else
	log "starting the job"
	rm -f "$CKPT_MEMBERS" "$status"
	leader=$("$ckpt" group exec --agent "$LAUNCHER_AGENT" --stdout "$CKPT_STATE/job.out" -- \
		env CKPT_NODES="$CKPT_NODES" CKPT="$ckpt" CKPT_MEMBERS="$CKPT_MEMBERS" \
		sh -c "$JOB; echo \$? > $status") || exit 1
	echo "$leader" > "$CKPT_STATE/leader"
fi

# Wait for the job to end; the warning signal interrupts the wait.
while [ ! -s "$status" ]; do
	sleep 1 &
	wait $!
done
rm -f "$manifest"
exit "$(cat "$status")"
