#!/bin/bash
# Data parallelism on one node: 4 tasks, one rank each (DDP).
#
#   sbatch examples/slurm/ddp-1node.sh
#
# Nothing to export by hand: every task reads its rank from SLURM_PROCID,
# the job size from SLURM_NTASKS, its node-local rank from SLURM_LOCALID;
# MASTER_ADDR defaults to the first host of SLURM_JOB_NODELIST and
# MASTER_PORT to a port derived from SLURM_JOB_ID, so two jobs on one node
# do not collide. Ranks of one node talk through shared memory.
#SBATCH --job-name=gorun-ddp
#SBATCH --nodes=1
#SBATCH --ntasks=4
#SBATCH --time=30
set -euo pipefail
srun "${BIN:-bin}"/train --save mnist.safetensors ${TRAIN_ARGS:-}
