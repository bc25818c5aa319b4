#!/bin/bash
# ResNet-50 on the CPU, gorun against PyTorch 1.13 (torchvision's resnet50,
# OpenBLAS/oneDNN) in the same run, alternating: training steps and
# evaluation-mode forwards at batch 32, 224×224, with 1 and 2 threads,
# and training with every residual block recomputed in backward (gorun's
# --recompute, PyTorch's torch.utils.checkpoint);
# img/s and each process's peak RSS (/usr/bin/time). Usage:
#   bash bench/resnet50.sh [ROUNDS]
# Environment: BENCHTIME (gorun's timed steps after a warm-up one, default
# 3x; PyTorch times at least 10 s of steps), WHAT (default "train
# recompute infer"), THREADS (default "1 2"), OLD=DIR: also an earlier
# build's checkout (git worktree add DIR COMMIT), run just before this
# one, so that the two meet the same stretch of a noisy machine.
set -euo pipefail
rounds=${1:-2}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. bench/builds.sh
build_tests ./model/zoo
print_cpu
for round in $(seq "$rounds"); do
	for threads in ${THREADS:-1 2}; do
		for what in ${WHAT:-train recompute infer}; do
			case $what in
			train) bench='TrainStep/^resnet50$' ;;
			recompute) bench='TrainStep/^resnet50-recompute$' ;;
			infer) bench='Inference/^resnet50$' ;;
			esac
			bench=$bench/batch=32/threads=$threads
			for build in $(builds_in "$round"); do
				/usr/bin/time -f "gorun peak RSS %M KiB" "$tmp/$build.test" -test.run '^$' -test.bench "^Benchmark${bench}\$" -test.benchtime "${BENCHTIME:-3x}" 2>&1 |
					grep -E 'img/s|peak RSS' | sed "s/^/round $round $build: /"
			done
			OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads /usr/bin/python3 bench/competitors/torch_train.py resnet50-$what "$threads" 2>&1 |
				grep resnet50 | sed "s/^/round $round: /"
		done
	done
done
