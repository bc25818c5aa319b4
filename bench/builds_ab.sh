#!/usr/bin/env bash
# Two or more builds of `bench collectives`, gorun only (no competitor
# runs between them, so a round of several builds takes seconds), the
# order of the builds rotated each round (this VM's phases favour
# whichever runs first less often then). Prints one line per round,
# build, collective and size — ROUND BUILD COLLECTIVE NP SIZE µs — then
# per collective and size each build's median µs and, for every build
# after the first, the median and range over rounds of the first
# build's time ÷ its own (above 1: faster than the first). A build is
# named by the directory its binary lies in.
# Usage: bash bench/builds_ab.sh ROUNDS NP SIZES OPS BENCH BENCH... [-- ARGS...]
#   e.g. bash bench/builds_ab.sh 6 4 16B,1KB reduce,gather /tmp/A/bench /tmp/B/bench -- -variants tcp
# (build each with `go build -o DIR/ ./cmd/bench` in its checkout).
set -euo pipefail
source "$(dirname "$0")/ab_common.sh"
usage="usage: bash bench/builds_ab.sh ROUNDS NP SIZES OPS BENCH BENCH... [-- ARGS...]"
if [ $# -lt 6 ]; then
	echo "$usage" >&2
	exit 2
fi
rounds=$1 np=$2 sizes=$3 ops=$4
shift 4
want_rounds "$rounds"
bins=() names=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
	want_bench "" "$1"
	name=$(basename "$(dirname "$(realpath "$1")")")
	for n in "${names[@]}"; do
		if [ "$n" = "$name" ]; then
			echo "builds_ab.sh: two builds in directories named $name: put each in a directory of its own name" >&2
			exit 2
		fi
	done
	bins+=("$(realpath "$1")") names+=("$name")
	shift
done
[ $# -gt 0 ] && shift # the --
if [ ${#bins[@]} -lt 2 ]; then
	echo "$usage" >&2
	echo "builds_ab.sh: want at least two builds" >&2
	exit 2
fi
cd "$(dirname "$0")/.."
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
machine_line
echo "# builds ${names[*]} (${bins[*]}); np $np; sizes $sizes; $ops; $*"
echo "# round build collective np size gorun-µs"
n=${#bins[@]}
for round in $(seq "$rounds"); do
	for i in $(seq 0 $((n - 1))); do
		k=$(((i + round - 1) % n))
		"${bins[$k]}" collectives -helpers bench/competitors -np "$np" -sizes "$sizes" -ops "$ops" -competitors=false "$@" |
			awk -v b="${names[$k]}" -v r="$round" -v np="$np" '
				/^# Collective test:/ { op = $4; sub(",", "", op) }
				/^ +[0-9]+ +[0-9]+ +[a-z0-9]+ +[a-z]+ / { print r, b, op, np, $1, $6 }'
	done
done | tee "$tmp"
python3 - "$tmp" "${names[@]}" <<'EOF'
import collections, statistics, sys
rows = collections.defaultdict(lambda: collections.defaultdict(dict))
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 6 and f[0].isdigit():
        rows[(f[2], int(f[3]), int(f[4]))][f[1]][int(f[0])] = float(f[5])
builds = sys.argv[2:]
first = builds[0]
print(f"# collective np size: median µs of {' '.join(builds)}; per later build, {first} ÷ it: median [min–max] over rounds")
for (op, np, size), r in sorted(rows.items()):
    meds = [f"{statistics.median(r[b].values()):.2f}" if r[b] else "-" for b in builds]
    line = f"{op} np{np} {size}: " + " ".join(meds)
    for b in builds[1:]:
        ratios = [r[first][k] / r[b][k] for k in sorted(r[b]) if k in r[first] and r[b][k] > 0]
        if ratios:
            line += f" | {b} {statistics.median(ratios):.2f} [{min(ratios):.2f}–{max(ratios):.2f}]"
    print(line)
EOF
