#!/usr/bin/env bash
# Two builds of `bench collectives`, alternating which runs first each
# round (this VM's phases favour one order), each run with Open MPI in
# it when COMPETITORS=true (the default; vader for shared memory, its
# tcp btl for -variants tcp), so every figure has the competitor from
# the same run. Prints one line per
# round, build, collective and size — gorun's µs per call, then Open
# MPI's µs and its time ÷ gorun's when measured — then per size the
# medians, old ÷ new by round and the ranges of Open MPI ÷ gorun.
# Usage: bash bench/collectives_ab.sh OLD_BENCH NEW_BENCH ROUNDS NP SIZES OPS [ARGS...]
#   e.g. bash bench/collectives_ab.sh /tmp/old/bench bin/bench 4 2 1MB,2MB,4MB reduce,broadcast -iters 300 -warmup 30
# (build each with `go build -o DIR/ ./cmd/bench` in its checkout).
set -euo pipefail
source "$(dirname "$0")/ab_common.sh"
usage="usage: bash bench/collectives_ab.sh OLD_BENCH NEW_BENCH ROUNDS NP SIZES OPS [ARGS...]"
if [ $# -lt 6 ]; then
	echo "$usage" >&2
	exit 2
fi
old=$1 new=$2 rounds=$3 np=$4 sizes=$5 ops=$6
want_bench "" "$old"
want_bench "" "$new"
want_rounds "$rounds"
old=$(realpath "$old") new=$(realpath "$new")
cd "$(dirname "$0")/.."
shift 6
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
machine_line
echo "# old $old, new $new; np $np; sizes $sizes; $ops; competitors ${COMPETITORS:-true}; $*"
echo "# round build collective np size gorun-µs [open-mpi-µs open-mpi÷gorun]"
for round in $(seq "$rounds"); do
	order="old new"
	[ $((round % 2)) = 0 ] && order="new old"
	for build in $order; do
		bin=$old
		[ "$build" = new ] && bin=$new
		"$bin" collectives -helpers bench/competitors -np "$np" -sizes "$sizes" -ops "$ops" \
			-competitors="${COMPETITORS:-true}" "$@" |
			awk -v b="$build" -v r="$round" -v np="$np" '
				/^# Collective test:/ { op = $4; sub(",", "", op) }
				/^ +[0-9]+ +[0-9]+ +[a-z0-9]+ +[a-z]+ / { if (!vs) mine[op, $1] = $6 }
				/against the competitors/ { vs = 1; op = $2; col = /variant tcp/ ? 6 : 8 }
				vs && /^ +[0-9]+ +[0-9]+ +[0-9.]+ / { them[op, $2] = $col }
				END {
					for (k in mine) {
						split(k, p, SUBSEP)
						line = r " " b " " p[1] " " np " " p[2] " " mine[k]
						if ((k in them) && them[k] != "-") line = line sprintf(" %s %.2f", them[k], them[k] / mine[k])
						print line
					}
				}' | sort -k3,3 -k5,5n
	done
done | tee "$tmp"
python3 - "$tmp" <<'EOF'
import collections, statistics, sys
rows = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) >= 6 and not line.startswith("#"):
        rows[(f[2], int(f[4]))][(int(f[0]), f[1])] = [float(x) for x in f[5:]]
print("# collective size: gorun median µs old → new; old ÷ new by round; Open MPI ÷ gorun range old | new")
for (op, size), r in sorted(rows.items()):
    med = {b: statistics.median(v[0] for (_, bb), v in r.items() if bb == b) for b in ("old", "new")}
    pairs = [r[(n, "old")][0] / r[(n, "new")][0] for n in sorted({n for n, _ in r}) if (n, "old") in r and (n, "new") in r]
    line = f"{op} {size}: {med['old']:.2f} → {med['new']:.2f}; " + " ".join(f"{x:.2f}" for x in pairs)
    for b in ("old", "new"):
        vs = [v[2] for (_, bb), v in r.items() if bb == b and len(v) > 2]
        if vs:
            line += f"; {b} {min(vs):.2f}–{max(vs):.2f}"
    print(line)
EOF
