#!/bin/bash
# One task: the MNIST net on one process (the workshops' first step).
#
#   sbatch examples/slurm/one-task.sh
#
# BIN (default bin) holds gorun's binaries (go build -o bin/ ./cmd/...);
# TRAIN_ARGS are added to train's flags.
#SBATCH --job-name=gorun-one
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=2
#SBATCH --time=30
set -euo pipefail
# srun gives the task SLURM_PROCID and friends; comm.Init reads them, so a
# job of one task is a process group of one.
srun "${BIN:-bin}"/train --save mnist.safetensors ${TRAIN_ARGS:-}
