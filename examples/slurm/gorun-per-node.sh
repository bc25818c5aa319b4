#!/bin/bash
# Data parallelism across 2 nodes with one gorun per node, as torchrun
# users start one agent per node: srun starts gorun once on each node,
# and each gorun starts -np ranks there; together they make one job of
# 2 × 2 ranks. gorun takes -nnodes, -node-rank and -master from srun's
# variables (the step's first node, a port from the job and step ids);
# the nodes prove a shared token to each other, made here and passed to
# every task by srun.
#
#   sbatch examples/slurm/gorun-per-node.sh
#
# The same job without gorun is ddp-2nodes.sh (srun starts every rank).
#SBATCH --job-name=gorun-per-node
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --time=30
set -euo pipefail
GORUN_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export GORUN_TOKEN
srun -K "${BIN:-bin}"/gorun -np 2 "${BIN:-bin}"/train --save mnist.safetensors ${TRAIN_ARGS:-}
