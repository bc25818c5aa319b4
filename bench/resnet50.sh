#!/bin/bash
# ResNet-50 on the CPU, gorun against PyTorch 1.13 (torchvision's resnet50,
# OpenBLAS/oneDNN) in the same run, alternating: training steps and
# evaluation-mode forwards at batch 32, 224×224, with 1 and 2 threads,
# and training with every residual block recomputed in backward (gorun's
# --recompute, PyTorch's torch.utils.checkpoint);
# img/s and each process's peak RSS (/usr/bin/time). Usage:
#   bash bench/resnet50.sh [ROUNDS]        (BENCHTIME=1x for one timed step)
set -euo pipefail
rounds=${1:-2}
cd "$(dirname "$0")/.."
go test -c -o /tmp/zoo.test ./model/zoo
lscpu | grep -E 'Model name|^CPU\(s\)' | tr -s ' '
for round in $(seq "$rounds"); do
	for threads in 1 2; do
		for what in train recompute infer; do
			case $what in
			train) bench='TrainStep/^resnet50$' ;;
			recompute) bench='TrainStep/^resnet50-recompute$' ;;
			infer) bench='Inference/^resnet50$' ;;
			esac
			bench=$bench/batch=32/threads=$threads
			/usr/bin/time -f "gorun peak RSS %M KiB" /tmp/zoo.test -test.run '^$' -test.bench "^Benchmark${bench}\$" -test.benchtime "${BENCHTIME:-3x}" 2>&1 |
				grep -E 'img/s|peak RSS'
			OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads /usr/bin/python3 bench/competitors/torch_train.py resnet50-$what "$threads" 2>&1 |
				grep resnet50
		done
	done
done
