#!/bin/bash
# The GPU checks of issue 9 in one go: kernel parity against the CPU
# backend, the staged collectives on GPU memory, pinned against pageable
# copy bandwidth and the staging path's, the MNIST net trained on the GPU
# and on the CPU, DDP with two ranks sharing the GPU, training throughput
# against PyTorch (cuDNN) on the same GPU, and ResNet-50 at batch 256
# against PyTorch in FP32, TF32 and mixed precision (bf16 and fp16
# autocast, channels-last; gorun's bf16 autocast beside them), with each
# process's peak GPU memory.
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
# pipeline ddp ddp16 throughput resnet50 profile); all by default.
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
log "MNIST net on Fashion-MNIST, 3 epochs on the GPU in bf16 autocast (issue 30: within 0.3 points of float32)"
"$BIN/train" --device cuda --data "$DATA" --epochs 3 --precision bf16 --progress lines 2>&1 | tee "$OUT/mnist-gpu-bf16.txt" | grep -E "Model|Epoch|epoch|accuracy|Test|total" | tail -8
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

# ROUNDS (default 3) alternating rounds in the throughput section.
if want throughput; then
log "training throughput: gorun vs PyTorch on the same GPU (no augmentation, synthetic data; three alternating runs)"
gorun_train() { # model images batch [--tf32]
	"$BIN/train" --device cuda --model "$1" --synthetic --train-samples "$2" --test-samples 512 --batch-size "$3" \
		--epochs 2 --augment=false --optimizer sgd --lr 0.01 --momentum 0.9 --scheduler none --progress lines ${4:-} 2>&1 |
		grep "^Epoch 2:" | sed "s/^/gorun $1 ${4:---fp32}: /"
}
for spec in "cifarnet 25600 128" "mnist 60000 64"; do
	set -- $spec
	for run in $(seq ${ROUNDS:-3}); do
		gorun_train "$1" "$2" "$3"
		$PY bench/competitors/torch_gpu_train.py "$1" "$2" "$3" fp32
		gorun_train "$1" "$2" "$3" --tf32
		$PY bench/competitors/torch_gpu_train.py "$1" "$2" "$3" tf32
		$PY bench/competitors/torch_gpu_train.py "$1" "$2" "$3" default
	done
done 2>&1 | tee "$OUT/throughput.txt"
fi

if want resnet50; then
RN_BATCH=${RN_BATCH:-256} RN_IMAGES=${RN_IMAGES:-2048}
log "ResNet-50 (ImageNet-shaped synthetic data), batch $RN_BATCH: gorun and PyTorch on the same GPU, peak GPU memory of each process (nvidia-smi)"
# peak CMD...: runs CMD and prints, after its output, the most GPU memory
# any process held while it ran (nvidia-smi, context included), in MiB.
peak() {
	"$@" &
	local pid=$! max=0 m
	while kill -0 $pid 2>/dev/null; do
		m=$(nvidia-smi --query-compute-apps=used_memory --format=csv,noheader,nounits 2>/dev/null | sort -n | tail -1)
		[ -n "$m" ] && [ "$m" -gt "$max" ] && max=$m
		sleep 0.2
	done
	wait $pid || true
	echo "  peak GPU memory (nvidia-smi) $max MiB"
}
gorun_resnet() { # label, then train's flags
	local label=$1
	shift
	timeout 300 "$BIN/train" --device cuda --model resnet50 --synthetic --train-samples "$RN_IMAGES" --test-samples "$RN_BATCH" \
		--batch-size "$RN_BATCH" --epochs 2 --augment=false --optimizer sgd --lr 0.01 --momentum 0.9 --scheduler none --progress lines "$@" 2>&1 |
		grep -E "^(Model|Epoch 2:|Peak|panic|error|train:|gpu:)" | sed "s/^/gorun resnet50 $label: /"
}
# RN_GORUN and RN_TORCH choose the precisions of each (all by default;
# "tf32-im2col" is TF32 with our own convolutions).
for run in $(seq ${RN_RUNS:-1}); do
	for p in ${RN_GORUN:-fp32 tf32 tf32-im2col bf16}; do
		case $p in
		tf32-im2col) GORUN_CONV=im2col peak gorun_resnet "tf32 im2col" --precision tf32 ;;
		*) peak gorun_resnet $p --precision $p ;;
		esac
	done
	for mode in ${RN_TORCH:-fp32 tf32 amp amp-fp16}; do
		peak timeout 300 $PY bench/competitors/torch_gpu_train.py resnet50 "$RN_IMAGES" "$RN_BATCH" $mode
	done
done 2>&1 | tee "$OUT/resnet50.txt"
fi

if want ddp16; then
log "DDP with 16-bit gradients on the wire: two ranks sharing the GPU, CIFARNet (float32, bf16, fp16)"
for c in none bf16 fp16; do
	timeout 120 "$BIN/gorun" -np 2 "$BIN/train" --device cuda --model cifarnet --synthetic --train-samples 12800 --test-samples 1000 \
		--epochs 2 --grad-compression $c --progress lines 2>&1 | grep -E "^\[0\] (Epoch|Test)|error|failed" | sed "s/^/$c: /"
done 2>&1 | tee "$OUT/ddp16.txt"
fi

if want profile; then
log "where ResNet-50's ${PROFILE_PRECISION:=tf32} step goes (GORUN_GPU_PROFILE: every operation waited for)"
GORUN_GPU_PROFILE=1 timeout 120 "$BIN/train" --device cuda --model resnet50 --synthetic --train-samples 2048 --test-samples 256 \
	--batch-size 256 --epochs 2 --augment=false --optimizer sgd --lr 0.01 --momentum 0.9 --scheduler none --progress lines --precision $PROFILE_PRECISION 2>&1 |
	grep -A30 "GPU operations" | head -16 | tee "$OUT/profile.txt"
fi
