#!/bin/bash
# Data parallelism across 2 nodes × 2 tasks (DDP): the gradients of each
# step are averaged over all 4 ranks, shared memory within a node, TCP
# between nodes.
#
#   sbatch examples/slurm/ddp-2nodes.sh
#
# -K (--kill-on-bad-exit): when one task fails, srun kills the others at
# once and reports "task N: Exited with exit code C" naming the failed
# task; without it the survivors notice the dead rank themselves and exit
# with an error naming it (within GORUN_TIMEOUT).
#SBATCH --job-name=gorun-ddp2
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --time=30
set -euo pipefail
srun -K "${BIN:-bin}"/train --save mnist.safetensors ${TRAIN_ARGS:-}
