#!/bin/bash
# Seed 001's job: torchvision's ResNet-50 on ImageNet, data-parallel over
# 2 nodes (one task per node; raise --nodes for more), from an image
# folder (DATA/train/CLASS/*.JPEG, DATA/val/CLASS/*.JPEG — ImageNet after
# the usual reorganisation of its validation set).
#
#   DATA=/datasets/imagenet sbatch examples/slurm/resnet50-imagenet.sh
#
# Each task decodes its own share of every batch on SLURM_CPUS_PER_TASK
# goroutines (seed 001's num_workers; libjpeg-turbo when libturbojpeg0 is
# installed) with torchvision's RandomResizedCrop and flip, keeps a
# checkpoint every 500 steps and after every epoch, and, started again
# after a failure (sbatch --requeue, or by hand), resumes from it.
# TensorBoard logs go to runs/resnet50; top-1 and top-5 accuracy are
# printed after every epoch. Data-loading stalls show in the time
# breakdown at the end ("data").
#SBATCH --job-name=gorun-resnet50
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --time=60
set -euo pipefail
srun -K "${BIN:-bin}"/train --model resnet50 --data "${DATA:?set DATA to an image folder}" \
	--workers "${SLURM_CPUS_PER_TASK:-1}" --save resnet50.safetensors --save-every 500 --resume auto \
	--tensorboard runs/resnet50 ${TRAIN_ARGS:-}
