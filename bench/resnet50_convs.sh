#!/bin/bash
# ResNet-50's 23 distinct convolutions (batch 32, one thread), gorun
# against PyTorch 1.13 layer by layer: for each layer gorun's forward and
# forward + backward (BenchmarkResNet50Convs), then PyTorch's
# (torch_layers.py 1 resnet50 LAYER), so that both meet the same stretch
# of a noisy machine; the micro-kernel's peak before each round. Then a
# table of medians: ms, GFLOP/s, % of the micro-kernel's peak, PyTorch ÷
# gorun time, and each layer's weight in the network (how many of its 53
# convolutions have the shape). Usage:
#   bash bench/resnet50_convs.sh [ROUNDS] [LAYER_REGEXP]
# OLD=DIR: also an earlier build's checkout (git worktree add DIR COMMIT),
# its layer run just before this build's, and its own columns and
# totals in the table (old ÷ new time). MODEL=resnet18: ResNet-18's 11
# distinct convolutions on CIFAR-10's 32×32 images instead (20 in the
# network; BenchmarkResNet18Convs, torch_layers.py 1 resnet18 LAYER),
# 20 timed runs a layer instead of 3.
set -euo pipefail
rounds=${1:-3}
only=${2:-.}
model=${MODEL:-resnet50}
case $model in
resnet50) bench=ResNet50Convs runs=3x ;;
resnet18) bench=ResNet18Convs runs=20x ;;
*) echo "MODEL=$model: resnet50 or resnet18" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. bench/builds.sh
build_tests ./model/nn
go test -c -o "$tmp/gemm.test" ./model/gemm
print_cpu
sed -n "/^var ${model}Convs = /,/^}/p" model/nn/bench_test.go > "$tmp/table"
layers=$(sed -n 's/^\t{"\([a-z0-9_]*\)", [0-9]*, [0-9]*, [0-9]*, [0-9]*, [0-9]*, [0-9]*},$/\1/p' "$tmp/table" | grep -E "$only")
for round in $(seq "$rounds"); do
	"$tmp/gemm.test" -test.run '^$' -test.bench '^BenchmarkMicroKernel$' -test.benchtime 1s | grep GFLOP | sed "s/^/round $round /"
	for layer in $layers; do
		if [ -n "${OLD:-}" ]; then
			"$tmp/old.test" -test.run '^$' -test.bench "^Benchmark$bench/$layer/" -test.benchtime $runs | { grep GFLOP || echo "old build: no $bench/$layer" >&2; } | sed "s/^/round $round old /"
		fi
		"$tmp/new.test" -test.run '^$' -test.bench "^Benchmark$bench/$layer/" -test.benchtime $runs | grep GFLOP | sed "s/^/round $round /"
		OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /usr/bin/python3 bench/competitors/torch_layers.py 1 "$model" "$layer" | grep "^$model conv" | sed "s/^/round $round /"
	done
done | tee "$tmp/out"
python3 - "$tmp/out" "$tmp/table" <<'PY'
import re, statistics, sys
g, t, old, peak, count = {}, {}, {}, [], {}
for line in open(sys.argv[1]):
    if m := re.search(r'MicroKernel\S*\s+\d+\s+[\d.]+ ns/op\s+([\d.]+) GFLOP/s', line):
        peak.append(float(m[1]))
    elif m := re.search(r'ResNet\d+Convs/(\w+)/(\w+)-\d+\s+\d+\s+(\d+) ns/op\s+([\d.]+) GFLOP/s', line):
        (old if line.split()[2] == "old" else g).setdefault((m[1], m[2]), []).append((int(m[3]) / 1e6, float(m[4])))
    elif m := re.search(r'resnet\d+ conv (\w+)\s+(\w+)\s+([\d.]+) ms\s+([\d.]+) GFLOP/s', line):
        t.setdefault((m[1], m[2]), []).append((float(m[3]), float(m[4])))
for line in open(sys.argv[2]):
    if m := re.search(r'\{"(\w+)", \d+, \d+, \d+, \d+, \d+, (\d+)\}', line):
        count[m[1]] = int(m[2])
p = statistics.median(peak)
print(f"micro-kernel peak (median of {len(peak)}): {p:.1f} GFLOP/s")
print("| layer | pass | × | gorun ms | gorun GFLOP/s | % of peak | PyTorch ms | PyTorch ÷ gorun time |" + (" old ms | old ÷ new time |" if old else ""))
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |" + (" ---: | ---: |" if old else ""))
total, oldTotal = {}, {}
for key in g:
    if key not in t:
        continue
    gm = statistics.median(x[0] for x in g[key]); gf = statistics.median(x[1] for x in g[key])
    tm = statistics.median(x[0] for x in t[key])
    c = count[key[0]]
    total.setdefault(key[1], [0, 0])
    total[key[1]][0] += c * gm; total[key[1]][1] += c * tm
    row = f"| {key[0]} | {key[1]} | {c} | {gm:.2f} | {gf:.1f} | {100 * gf / p:.0f}% | {tm:.2f} | {tm / gm:.2f} |"
    if key in old:
        om = statistics.median(x[0] for x in old[key])
        oldTotal[key[1]] = oldTotal.get(key[1], 0) + c * om
        row += f" {om:.2f} | {om / gm:.2f} |"
    print(row)
for k, (gm, tm) in total.items():
    line = f"whole network's convolutions, {k}: gorun {gm:.1f} ms, PyTorch {tm:.1f} ms, PyTorch ÷ gorun {tm / gm:.2f}"
    if k in oldTotal:
        line += f"; old build {oldTotal[k]:.1f} ms, old ÷ new {oldTotal[k] / gm:.2f}"
    print(line)
PY
