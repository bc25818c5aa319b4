#!/bin/bash
# Flat against hierarchical collectives across simulated hosts: HOSTS
# network namespaces (default 3) × NP ranks (default 2) on a bridge
# (bench cluster, bench/netcluster), each host's link limited with tc
# tbf (or unshaped; DELAY and LOSS add a one-way delay and a loss
# fraction, by tc netem or, where the kernel has none, the user-space
# link emulator, which then sets the rate too), GORUN_ALGO=flat,
# GORUN_ALGO=hierarchical and, with GLOO=1, PyTorch's gloo (Debian's
# python3-torch; no reduce-scatter) alternating for ROUNDS rounds. Rank
# 0's rows, time per call in µs. Needs root and iproute2.
# CONTESTANTS lists gorun's settings instead: ALGO or ALGO/NET for
# GORUN_ALGO=ALGO GORUN_NET=NET (e.g. "auto auto/none flat/none").
#   [HOSTS=3] [NP=2] [GLOO=1] [DELAY=1ms] [LOSS=0.01] [CONTESTANTS=...] bash bench/hier.sh [RATE|unshaped] [OPS] [SIZES] [ROUNDS] [ITERS]
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:-1gbit}
ops=${2:-broadcast,all_gather,reduce_scatter}
sizes=${3:-256KB,1MB,4MB,16MB,64MB}
rounds=${4:-3}
iters=${5:-5}
hosts=${HOSTS:-3}
np=${NP:-2}
go build -o bin/ ./cmd/gorun ./cmd/bench
lscpu | grep -E 'Model name|^CPU\(s\)|CPU family|^Model:' | tr -s ' '
shape=()
if [ "$rate" != unshaped ]; then shape=(-rate "$rate"); fi
if [ -n "${DELAY:-}" ]; then shape+=(-delay "$DELAY"); fi
if [ -n "${LOSS:-}" ]; then shape+=(-loss "$LOSS"); fi
contestants=${CONTESTANTS:-flat hierarchical}
gloo=()
if [ "${GLOO:-0}" = 1 ]; then
	contestants+=" gloo"
	gloo=("iters=$iters")
	bytes() { # 256KB → 262144, as bench's -sizes reads it
		local n=${1%%[KMG]B*} u=${1#"${1%%[KMG]B*}"}
		case $u in KB) echo $((n << 10)) ;; MB) echo $((n << 20)) ;; GB) echo $((n << 30)) ;; *) echo "${1%B}" ;; esac
	}
	for op in ${ops//,/ }; do
		[ "$op" = reduce_scatter ] && continue
		gloo+=("op=$op")
		for s in ${sizes//,/ }; do gloo+=("$(bytes "$s")"); done
	done
fi
for round in $(seq "$rounds"); do
	for who in $contestants; do
		if [ "$who" = gloo ]; then
			echo "## round $round gloo"
			bin/bench cluster -hosts "$hosts" -np "$np" "${shape[@]}" -each -- /usr/bin/python3 bench/competitors/gloo_allreduce.py $((hosts * np)) "${gloo[@]}" 2>&1 | grep -E '^#|^gloo'
			continue
		fi
		algo=${who%%/*} net=auto
		[ "$who" != "$algo" ] && net=${who#*/}
		echo "## round $round GORUN_ALGO=$who"
		GORUN_ALGO=$algo GORUN_NET=$net bin/bench cluster -hosts "$hosts" -np "$np" "${shape[@]}" -- \
			bin/bench collectives -in-job -ops "$ops" -sizes "$sizes" -iters "$iters" -warmup 1 -competitors=false 2>&1 |
			grep -E '^#|^\[0\] +#? *(size|[0-9])|host by host|cost model'
	done
done
