#!/bin/bash
# The GPU checks of issue 9 in one go: kernel parity against the CPU
# backend, the staged collectives on GPU memory, pinned against pageable
# copy bandwidth and the staging path's, the MNIST net trained on the GPU
# and on the CPU, DDP with two ranks sharing the GPU, and training
# throughput against PyTorch (cuDNN) on the same GPU.
#
#   bash bench/gpu.sh build          # where Go is: static binaries in bin/gpu
#   bash bench/gpu.sh run [OUTDIR]   # on the GPU machine (no Go needed)
#
# DATA (default /usr/share/datasets/fashion-mnist, else .data/fashion-mnist)
# is the Fashion-MNIST directory; PYTHON (default python3) has torch with CUDA.
set -euo pipefail
BIN=${BIN:-bin/gpu}

if [ "${1:-}" = build ]; then
	mkdir -p "$BIN"
	export CGO_ENABLED=0
	go build -ldflags='-s -w' -o "$BIN/" ./cmd/gorun ./cmd/train ./cmd/infer
	for p in cuda model/gpu comm; do
		go test -c -ldflags='-s -w' -o "$BIN/$(basename $p).test" ./$p
	done
	ls -la "$BIN"
	exit 0
fi

OUT=${2:-gpu-results}
mkdir -p "$OUT"
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
[ -d "$DATA" ] || DATA=.data/fashion-mnist
PY=${PYTHON:-python3}
log() { echo; echo "== $*"; }
# ONLY="parity copy" runs just those sections (parity staged copy mnist save
# pipeline ddp throughput); all by default.
want() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }

log "GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"

if want parity; then
log "kernel parity and driver binding (three runs, fresh random inputs each)"
"$BIN/cuda.test" -test.v 2>&1 | tail -8
"$BIN/gpu.test" -test.count=3 -test.v 2>&1 | grep -E "^(--- |ok|PASS|FAIL)" | sort | uniq -c | tee "$OUT/parity.txt"
fi

if want staged; then
log "staged collectives on GPU memory (1-4 ranks)"
"$BIN/comm.test" -test.run 'TestStagedCollectives' -test.v 2>&1 | grep -E "GPU|PASS|FAIL|ok" | tee "$OUT/staged.txt"
fi

if want copy; then
log "copy bandwidth: pinned vs pageable, and the staging path"
"$BIN/cuda.test" -test.run '^$' -test.bench Copy -test.benchtime 20x 2>&1 | grep -E "Benchmark" | tee "$OUT/copy.txt"
"$BIN/comm.test" -test.run '^$' -test.bench Staging -test.benchtime 10x 2>&1 | grep -E "Benchmark" | tee -a "$OUT/copy.txt"
fi

if want mnist; then
log "MNIST net on Fashion-MNIST, 3 epochs, one rank: GPU, then CPU"
"$BIN/train" --device cuda --data "$DATA" --epochs 3 --progress lines 2>&1 | tee "$OUT/mnist-gpu.txt" | grep -E "Model|Epoch|epoch|accuracy|Test|total" | tail -8
"$BIN/train" --device cpu --data "$DATA" --epochs 3 --progress lines 2>&1 | tee "$OUT/mnist-cpu.txt" | grep -E "Model|Epoch|epoch|accuracy|Test|total" | tail -8
fi

if want save; then
log "save on the GPU, reload and evaluate with infer on the GPU (the accuracies must agree)"
"$BIN/train" --device cuda --data "$DATA" --epochs 1 --save "$OUT/mnist.safetensors" --progress lines 2>&1 | grep -E "^Test set" | tee "$OUT/save-infer.txt"
"$BIN/infer" --device cuda --weights "$OUT/mnist.safetensors" --data "$DATA" 2>&1 | grep -E "^Test set" | tee -a "$OUT/save-infer.txt"
rm -f "$OUT"/mnist.safetensors*
fi

if want pipeline; then
log "GPipe: two stages sharing the GPU, 4 microbatches, 1 epoch; then the same on the CPU"
for dev in cuda cpu; do
	"$BIN/gorun" -np 2 "$BIN/train" --device $dev --data "$DATA" --epochs 1 --pipeline 2 --microbatches 4 --progress lines 2>&1 |
		tee "$OUT/pipeline-$dev.txt" | grep -E "backend|Stage|stage|Epoch 1|Test set" | tail -6
done
fi

if want ddp; then
log "DDP: two ranks sharing the GPU"
"$BIN/gorun" -np 2 "$BIN/train" --device cuda --data "$DATA" --epochs 3 --progress lines 2>&1 | tee "$OUT/mnist-ddp-gpu.txt" | grep -E "Model|Epoch|epoch|accuracy|Test|total" | tail -8
fi

if want throughput; then
log "training throughput: gorun vs PyTorch on the same GPU (no augmentation, synthetic data; three alternating runs)"
gorun_train() { # model images batch [--tf32]
	"$BIN/train" --device cuda --model "$1" --synthetic --train-samples "$2" --test-samples 512 --batch-size "$3" \
		--epochs 2 --augment=false --optimizer sgd --lr 0.01 --momentum 0.9 --scheduler none --progress lines ${4:-} 2>&1 |
		grep "^Epoch 2:" | sed "s/^/gorun $1 ${4:---fp32}: /"
}
for spec in "cifarnet 25600 128" "mnist 60000 64"; do
	set -- $spec
	for run in 1 2 3; do
		gorun_train "$1" "$2" "$3"
		$PY bench/competitors/torch_gpu_train.py "$1" "$2" "$3" fp32
		gorun_train "$1" "$2" "$3" --tf32
		$PY bench/competitors/torch_gpu_train.py "$1" "$2" "$3" tf32
		$PY bench/competitors/torch_gpu_train.py "$1" "$2" "$3" default
	done
done 2>&1 | tee "$OUT/throughput.txt"
fi
