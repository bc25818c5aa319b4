#!/usr/bin/env bash
# One setting of the environment against another: `bench collectives` of
# one build, alternating the values of VAR, the order rotated each round
# (this VM's phases favour whichever runs first less often then), with
# the competitors in every run unless the arguments turn them off
# (-competitors=false). Prints, per round and value, the run's summary
# and one line per collective, variant and size — ROUND VALUE COLLECTIVE
# VARIANT NP SIZE µs — then the medians by value, the first value's ÷ the
# second's, and Open MPI's medians where it ran.
# Usage: bash bench/env_ab.sh VAR "VALUE1 VALUE2 ..." [ROUNDS] [ARGS...]
# e.g. bash bench/env_ab.sh GORUN_DIRECT_BYTES "-1 0" 6 -np 2,4 -sizes 128KB,1MB,16MB -ops alltoall
# BENCH names the bench binary to run (default: this checkout's, built
# into bin/).
set -euo pipefail
source "$(dirname "$0")/ab_common.sh"
usage='usage: bash bench/env_ab.sh VAR "VALUE1 VALUE2 ..." [ROUNDS] [ARGS...]'
if [ $# -lt 2 ]; then
	echo "$usage" >&2
	exit 2
fi
var=$1 values=($2) rounds=${3:-3}
if ! [[ $var =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]]; then
	echo "env_ab.sh: VAR '$var': want an environment variable's name" >&2
	exit 2
fi
if [ ${#values[@]} -lt 2 ]; then
	echo "env_ab.sh: VALUES '$2': want at least two values, separated by spaces" >&2
	exit 2
fi
want_rounds "$rounds"
shift $(($# < 3 ? $# : 3))
bench=${BENCH:-}
if [ -n "$bench" ] && [[ $bench != /* ]]; then
	bench=$PWD/$bench # named from where the script was started
fi
cd "$(dirname "$0")/.."
if [ -z "$bench" ]; then
	go build -o bin/ ./cmd/bench
	bench=bin/bench
else
	want_bench "BENCH " "$bench"
fi
machine_line
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for round in $(seq "$rounds"); do
	n=${#values[@]}
	for i in $(seq 0 $((n - 1))); do
		v=${values[$(((i + round - 1) % n))]}
		echo "# round $round: $var=$v"
		env "$var=$v" "$bench" collectives "$@" |
			awk -v r="$round" -v v="$v" '
				/^# gorun collectives,/ { np = $4; variant = $NF }
				/^# Collective test:/ { op = $4; sub(",", "", op); gorun = 1; next }
				/^# Summary/ { gorun = 0; summary = 1 }
				gorun && /^ +[0-9]+ +[0-9]+ +[a-z0-9]+ +[a-z]+ / { print r, v, op, variant, np, $1, $6; next }
				summary { print }'
	done
done | tee "$tmp"
# Per collective, variant, np and size: gorun's median µs for each value
# [range], the first value's median ÷ the second's, and Open MPI's
# medians over every run (tcp btl, vader) where it was measured.
python3 - "$tmp" "${values[@]}" <<'PY'
import re, statistics as st, sys
values = sys.argv[2:]
table, gorun, mpi = None, {}, {}
for line in open(sys.argv[1]):
    f = line.split()
    if m := re.match(r"# (\w+) against the competitors \(variant (\w+)\)", line):
        table = m.groups()
    elif line.startswith("# round") or line.startswith("# Summary"):
        table = None
    elif len(f) == 7 and f[0].isdigit():
        gorun.setdefault((f[2], f[3], int(f[4]), int(f[5])), {}).setdefault(f[1], []).append(float(f[6]))
    elif table and len(f) >= 9 and f[0].isdigit():
        for k, col in enumerate((5, 7)):
            if f[col] != "-":
                mpi.setdefault((*table, int(f[0]), int(f[1])), ([], []))[k].append(float(f[col]))
if not gorun:
    sys.exit("env_ab.sh: no gorun times in the runs' output")
print("# collective variant np size: gorun median µs [range] per value; first ÷ second; Open MPI tcp | shm medians")
for key, by in sorted(gorun.items()):
    med = {v: st.median(by[v]) for v in values if v in by}
    line = " ".join(map(str, key)) + ": " + " | ".join(
        f"{v} {med[v]:.2f} [{min(by[v]):.2f}-{max(by[v]):.2f}]" for v in med)
    if values[0] in med and values[1] in med:
        line += f"; {med[values[0]] / med[values[1]]:.2f}"
    line += "; Open MPI " + " | ".join(f"{st.median(x):.2f}" if x else "-" for x in mpi.get(key, ([], [])))
    print(line)
PY
