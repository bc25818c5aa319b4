#!/bin/bash
# Pipeline parallelism: CIFARNet cut into 3 stages, one per task (GPipe,
# 8 microbatches per batch). Each stage saves its own weights
# (cifar.stageS.safetensors); bin/infer --weights cifar.safetensors --merge
# whole.safetensors joins them.
#
#   sbatch examples/slurm/gpipe-3tasks.sh
#SBATCH --job-name=gorun-gpipe
#SBATCH --ntasks=3
#SBATCH --time=60
set -euo pipefail
srun -K "${BIN:-bin}"/train --model cifarnet --pipeline 3 --microbatches 8 --save cifar.safetensors ${TRAIN_ARGS:-}
