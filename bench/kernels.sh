#!/bin/bash
# The CPU backend's GEMM micro-kernels against each other on this CPU:
# the workshop models' training steps and evaluation forwards
# (BenchmarkTrainStep and BenchmarkInference of model/zoo: the MNIST
# net, CIFARNet and ResNet-18 on CIFAR-10, then ResNet-50 at 224×224),
# at one and two threads, each benchmark run with each kernel in turn
# (GORUN_CPU_KERNEL, the trainer's override), round after round; img/s
# per round, then each kernel ÷ the first by round. The measurement
# behind the kernel gemm picks for a CPU (model/gemm/kernel_amd64.go).
# Usage:
#   bash bench/kernels.sh [ROUNDS]
# Environment: KERNELS (default "avx512 avx2-fma" on a CPU with AVX-512,
# "avx2-fma go" without), MODELS (a -test.bench regexp of the small
# models, default "mnist|cifarnet|resnet18"), RESNET50 (default 1; 0
# leaves it out).
set -euo pipefail
rounds=${1:-2}
# By default the two vector kernels where the CPU has AVX-512, else the
# AVX2 one against the Go one.
if grep -qw avx512f /proc/cpuinfo; then
	default_kernels="avx512 avx2-fma"
else
	default_kernels="avx2-fma go"
fi
kernels=${KERNELS:-$default_kernels}
models=${MODELS:-mnist|cifarnet|resnet18}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. bench/builds.sh
build_tests ./model/zoo
print_cpu
units=""
for model in ${models//|/ }; do
	units="$units TrainStep/^$model\$:1s Inference/^$model\$:1s"
done
if [ "${RESNET50:-1}" != 0 ]; then
	# ResNet-50's steps take seconds: two timed after the warm-up.
	units="$units TrainStep/^resnet50\$:2x Inference/^resnet50\$:2x"
fi
for round in $(seq "$rounds"); do
	# Kernel by kernel within each benchmark, so that the kernels compared
	# meet the same stretch of the machine's phases.
	for unit in $units; do
		bench=${unit%:*} benchtime=${unit##*:}
		for kernel in $kernels; do
			GORUN_CPU_KERNEL=$kernel "$tmp/new.test" -test.run '^$' -test.bench "^Benchmark$bench/" -test.benchtime "$benchtime" |
				awk -v r="$round" -v k="$kernel" '/img\/s/ {print "round", r, k, $1, $(NF-1), "img/s"} /FAIL|GORUN_CPU_KERNEL/ {print > "/dev/stderr"}'
		done
	done
done | tee "$tmp/out"
python3 - "$tmp/out" "$kernels" <<'PY'
import sys
rows, kernels = {}, sys.argv[2].split()
for line in open(sys.argv[1]):
    f = line.split()
    rows.setdefault(f[3], {}).setdefault(f[2], {})[f[1]] = float(f[4])
print(f"{' ÷ '.join(kernels[1:])} ÷ {kernels[0]}, by round:")
for bench, by in rows.items():
    for k in kernels[1:]:
        ratios = [f"{by[k][r] / by[kernels[0]][r]:.2f}" for r in sorted(by.get(k, {})) if r in by.get(kernels[0], {})]
        print(f"  {bench} {k}: {', '.join(ratios)}")
PY
