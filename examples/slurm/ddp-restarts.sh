#!/bin/bash
# Data parallelism across 2 nodes × 2 tasks that survives failed tasks,
# as gorun -max-restarts does on one machine: when a task fails, srun -K
# stops the step, and the loop starts a new one (a new step id, so a new
# MASTER_PORT) that resumes from the last checkpoint, written every
# SAVE_EVERY optimizer steps; the result is the uninterrupted run's,
# bit for bit. Tasks see GORUN_RESTART=n.
#
#   sbatch examples/slurm/ddp-restarts.sh
#SBATCH --job-name=gorun-restarts
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --time=60
set -uo pipefail
max=${MAX_RESTARTS:-3}
for ((restart = 0; ; restart++)); do
	export GORUN_RESTART=$restart
	srun -K "${BIN:-bin}"/train --save mnist.safetensors --save-every "${SAVE_EVERY:-20}" --resume auto ${TRAIN_ARGS:-}
	status=$?
	if [ "$status" = 0 ]; then
		exit 0
	fi
	if [ "$restart" -ge "$max" ]; then
		echo "ddp-restarts: the step failed $((restart + 1)) times (status $status), $max restarts allowed" >&2
		exit "$status"
	fi
	echo "ddp-restarts: the step failed (status $status); restarting every task (restart $((restart + 1)) of $max)" >&2
done
