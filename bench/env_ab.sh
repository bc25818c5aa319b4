#!/usr/bin/env bash
# One setting of the environment against another: `bench collectives` of
# one build, alternating the values of VAR, the order rotated each round
# (this VM's phases favour whichever runs first less often then), with
# the competitors in every run unless the arguments turn them off; then
# the medians by value.
# Usage: bash bench/env_ab.sh VAR "VALUE1 VALUE2 ..." [ROUNDS] [ARGS...]
# e.g. bash bench/env_ab.sh GORUN_DIRECT_BYTES "-1 0" 6 -np 2,4 -sizes 128KB,1MB,16MB -ops alltoall
set -euo pipefail
cd "$(dirname "$0")/.."
var=$1 values=($2) rounds=${3:-3}
shift $(($# < 3 ? $# : 3))
go build -o bin/ ./cmd/bench
lscpu | grep -E 'Model name|^CPU family|^Model:|^CPU\(s\)' | tr -s ' '
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for round in $(seq "$rounds"); do
	n=${#values[@]}
	for i in $(seq 0 $((n - 1))); do
		v=${values[$(((i + round - 1) % n))]}
		echo "# round $round: $var=$v"
		env "$var=$v" bin/bench collectives "$@" | sed -n '/^# Summary/,$p'
	done
done | tee "$tmp"
# Per collective, variant, np and size: gorun's median µs for each value
# [range], the first value's median ÷ the second's, and Open MPI's
# medians over every run (tcp btl, vader) where it was measured.
python3 - "$tmp" <<'PY'
import re, statistics as st, sys
value, table, rows = None, None, {}
for line in open(sys.argv[1]):
    if m := re.match(r"# round \d+: \S+=(\S+)", line):
        value = m.group(1)
    elif m := re.match(r"# (\w+) against the competitors \(variant (\w+)\)", line):
        table = m.groups()
    elif table and (f := line.split()) and len(f) >= 9 and f[0].isdigit():
        rows.setdefault((*table, int(f[0]), int(f[1])), {}).setdefault(value, []).append(f[2:])
print("# collective variant np size: gorun median µs [range] per value; first ÷ second; Open MPI tcp | shm medians")
for key, by in sorted(rows.items()):
    med = {v: st.median(float(r[0]) for r in rs) for v, rs in by.items()}
    line = " ".join(map(str, key)) + ": " + " | ".join(
        f"{v} {med[v]:.2f} [{min(float(r[0]) for r in rs):.2f}-{max(float(r[0]) for r in rs):.2f}]" for v, rs in by.items())
    if len(med) > 1:
        a, b = list(med.values())[:2]
        line += f"; {a / b:.2f}"
    mpi = [[float(r[k]) for rs in by.values() for r in rs if r[k] != "-"] for k in (3, 5)]
    line += "; Open MPI " + " | ".join(f"{st.median(x):.2f}" if x else "-" for x in mpi)
    print(line)
PY
