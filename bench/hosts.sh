#!/bin/bash
# All-reduce across simulated hosts: 3 network namespaces × 2 ranks on a
# bridge (bench cluster, bench/netcluster), links unshaped, limited to
# 10 Gbit/s and to 1 Gbit/s with tc tbf (delays and losses: bench/hier.sh's
# DELAY and LOSS). Bus bandwidth by size, nccl-tests' columns;
# rank 0's rows. Needs root and iproute2.
#   bash bench/hosts.sh [SIZES]
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=${1:-64KB,1MB,16MB,64MB}
go build -o bin/ ./cmd/gorun ./cmd/bench
lscpu | grep -E 'Model name|^CPU\(s\)' | tr -s ' '
for rate in "" 10gbit 1gbit; do
	bin/bench cluster -hosts 3 -np 2 ${rate:+-rate $rate} -- bin/bench collectives -in-job -ops all_reduce -sizes "$sizes" -iters 10 -competitors=false 2>&1 |
		grep -E '^#|^\[0\] +#? *(size|[0-9])'
done
