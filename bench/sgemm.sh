#!/bin/bash
# SGEMM and CIFARNet's convolution layers, gorun against OpenBLAS (through
# NumPy) and PyTorch 1.13 in the same run, alternating: per round and
# thread count, gorun's square and CIFARNet-shaped products
# (BenchmarkSgemm/best) and layers forward + backward at batch 32
# (BenchmarkConvLayer), then torch_layers.py's same products and layers;
# the micro-kernel's peak first. Then medians: GFLOP/s of each product,
# ms of each layer, and gorun ÷ competitor by round. Usage:
#   bash bench/sgemm.sh [ROUNDS]
# Environment: GORUN_CPU_KERNEL, as for the trainer. OLD=DIR: also an
# earlier build's checkout (git worktree add DIR COMMIT), its products
# and layers run beside this build's in each round (first in odd rounds,
# second in even ones), and gorun ÷ old build by round in the medians.
set -euo pipefail
rounds=${1:-3}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. bench/builds.sh
build_tests ./model/gemm gemm
build_tests ./model/nn nn
print_cpu
for round in $(seq "$rounds"); do
	"$tmp/new.gemm.test" -test.run '^$' -test.bench '^BenchmarkMicroKernel$' | awk -v r="$round" '/GFLOP/ {print "round", r, "peak", $(NF-1)}'
	for threads in 1 2; do
		for build in $(builds_in "$round"); do
			name=gorun
			[ "$build" = old ] && name=old
			"$tmp/$build.gemm.test" -test.run '^$' -test.bench "^BenchmarkSgemm/best/threads=$threads/" |
				awk -v r="$round" -v t="$threads" -v b="$name" '/GFLOP/ {split($1, p, "/"); sub(/-[0-9]+$/, "", p[4]); print "round", r, b, "sgemm", p[4], "threads=" t, $(NF-1)}'
			"$tmp/$build.nn.test" -test.run '^$' -test.bench "^BenchmarkConvLayer/threads=$threads/" |
				awk -v r="$round" -v t="$threads" -v b="$name" '/ns\/op/ {split($1, p, "/"); sub(/-[0-9]+$/, "", p[3]); print "round", r, b, "conv", p[3], "threads=" t, $3 / 1e6}'
		done
		OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads /usr/bin/python3 bench/competitors/torch_layers.py "$threads" |
			awk -v r="$round" -v t="$threads" '
				/^threads/ {print "#", $0}
				/^sgemm/ {print "round", r, "openblas sgemm", $2, "threads=" t, $4}
				/^conv/ {print "round", r, "torch conv", $2, "threads=" t, $4}'
	done
done | tee "$tmp/out"
python3 - "$tmp/out" <<'PY'
import statistics, sys
v, peak = {}, []
for line in open(sys.argv[1]):
    f = line.split()
    if f[0] != "round":
        continue
    if f[2] == "peak":
        peak.append(float(f[3]))
        continue
    v.setdefault((f[3], f[4], f[5]), {}).setdefault(f[2], {})[f[1]] = float(f[6])
print(f"micro-kernel peak (median of {len(peak)}): {statistics.median(peak):.1f} GFLOP/s")
for (kind, shape, threads), by in v.items():
    if "gorun" not in by:
        continue
    rival = "openblas" if kind == "sgemm" else "torch"
    unit = "GFLOP/s" if kind == "sgemm" else "ms"
    g, o = by["gorun"], by.get(rival, {})
    def speed(than):
        # gorun ÷ another as a speed: GFLOP/s over GFLOP/s, ms under ms.
        return ", ".join(f"{(g[r] / than[r] if kind == 'sgemm' else than[r] / g[r]):.2f}" for r in sorted(g) if r in than)
    line = (f"{kind} {shape} {threads}: gorun {statistics.median(g.values()):.2f} {unit}, {rival} "
            f"{statistics.median(o.values()) if o else float('nan'):.2f}; gorun's speed ÷ {rival}'s by round: {speed(o)}")
    if "old" in by:
        line += f"; ÷ old build's ({statistics.median(by['old'].values()):.2f} {unit}): {speed(by['old'])}"
    print(line)
PY
