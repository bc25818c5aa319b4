#!/bin/bash
# Data parallelism across 2 nodes × 2 tasks that goes on without a task
# that fails, as gorun -on-failure shrink does on one machine: the tasks
# left agree on who is alive, renumber themselves, deal the rest of the
# epoch out again and finish the run (train --on-failure shrink; each
# logs "train: lost rank N ... going on with 3 ranks").
#
#   sbatch examples/slurm/ddp-shrink.sh
#
# srun must let the others run on: --kill-on-bad-exit=0 and --wait=0 (no
# limit on how long they run after the first task ends) override the
# cluster's KillOnBadExit and WaitTime. srun then exits with the worst
# task's status, so a step that lost a task fails by it even when the
# others finished; each task's own status is kept in the job's working
# directory (which every node sees, as --save needs too), and the script
# exits 0 when at least one task ended well, naming the lost ones, as
# gorun does. ddp-restarts.sh starts every task again instead.
#SBATCH --job-name=gorun-shrink
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --time=60
set -uo pipefail
tasks=${SLURM_NTASKS:?ddp-shrink: SLURM_NTASKS is not set: submit this script with sbatch}
statuses=$(mktemp -d "$PWD/.gorun-shrink.XXXXXX") || exit 1
trap 'rm -rf "$statuses"' EXIT
srun --kill-on-bad-exit=0 --wait=0 bash -c '"$@"; s=$?; echo $s > "'"$statuses"'/$SLURM_PROCID"; exit $s' task \
	"${BIN:-bin}"/train --on-failure shrink --save mnist.safetensors --save-every "${SAVE_EVERY:-20}" ${TRAIN_ARGS:-}
status=$?
ended=0
lost=()
for ((t = 0; t < tasks; t++)); do
	if [ "$(cat "$statuses/$t" 2>/dev/null)" = 0 ]; then
		ended=$((ended + 1))
	else
		lost+=("$t")
	fi
done
if [ "$ended" = 0 ]; then
	echo "ddp-shrink: no task ended well (srun's status $status)" >&2
	exit $((status == 0 ? 1 : status))
fi
if [ ${#lost[@]} -gt 0 ]; then
	echo "ddp-shrink: the step finished without tasks ${lost[*]} of $tasks (--on-failure shrink; srun's status $status)" >&2
fi
exit 0
