#!/bin/bash
# The workshop models on the CPU, gorun against PyTorch 1.13 in the same
# run, alternating: training steps of the MNIST net (batch 64), CIFARNet
# (batch 128) and torchvision's resnet18 on CIFAR-10's 32×32 images
# (batch 32, seed 002), and evaluation-mode forwards of the last two
# (PyTorch eager and frozen by torch.jit.optimize_for_inference), at
# one and two threads (BenchmarkTrainStep and BenchmarkInference of
# model/zoo against `torch_train.py speed N`); img/s per round, then
# gorun ÷ PyTorch by round. Usage:
#   bash bench/workshop_models.sh [ROUNDS]
# Environment: OLD=DIR: also an earlier build's checkout (git worktree
# add DIR COMMIT), run just before this one in each round (after it in
# even rounds). MODELS: a regular expression of the models to run
# (default mnist|cifarnet|resnet18), for more rounds of one in the time.
set -euo pipefail
rounds=${1:-2}
models=${MODELS:-mnist|cifarnet|resnet18}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. bench/builds.sh
build_tests ./model/zoo
print_cpu
for round in $(seq "$rounds"); do
	for build in $(builds_in "$round"); do
		"$tmp/$build.test" -test.run '^$' -test.bench "TrainStep/($models)/|Inference/($models)/" |
			awk -v r="$round" -v b="$build" '/img\/s/ {print "round", r, b, $1, $(NF-1), "img/s"}'
	done
	for threads in 1 2; do
		OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads /usr/bin/python3 bench/competitors/torch_train.py speed "$threads" "$models" |
			awk -v r="$round" -v t="$threads" '/img\/s/ {print "round", r, "torch", $1 "/" $2 "/batch=" $4+0 "/threads=" t, $(NF-1), "img/s"}'
	done
done | tee "$tmp/out"
python3 - "$tmp/out" <<'PY'
import re, sys
go, torch = {}, {}
for line in open(sys.argv[1]):
    f = line.split()
    if f[2] == "torch":
        torch[(f[1], f[3])] = float(f[4])
    elif f[2] == "new":
        m = re.match(r"Benchmark(TrainStep|Inference)/(\w+)/batch=(\d+)/threads=(\d+)", f[3])
        kind = "train" if m[1] == "TrainStep" else "infer"
        go[(f[1], f"{kind}/{m[2]}/batch={m[3]}/threads={m[4]}")] = float(f[4])
print("gorun ÷ PyTorch by round (inference: ÷ eager; ÷ frozen):")
rounds = sorted({r for r, _ in go})
for key in sorted({k for _, k in go}):
    ratios = [f"{go[(r, key)] / torch[(r, key)]:.2f}" for r in rounds if (r, key) in torch]
    fkey = "infer-frozen" + key[len("infer"):]
    frozen = [f"{go[(r, key)] / torch[(r, fkey)]:.2f}" for r in rounds if key.startswith("infer/") and (r, fkey) in torch]
    print(f"  {key}: {', '.join(ratios)}" + (f"; {', '.join(frozen)}" if frozen else ""))
PY
