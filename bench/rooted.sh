#!/usr/bin/env bash
# Reduce, Gather, Scatter and AllToAll: gorun against Open MPI 4.1 in the
# same run, at np 2 and 4, through shared memory (gorun's default; Open
# MPI's vader) and loopback TCP (GORUN_TRANSPORT=tcp; Open MPI's tcp btl).
# Each round runs `bench collectives` (gorun's table, then Open MPI's
# times at the same sizes and the ratio their time / gorun's), so rounds
# alternate the contestants. Usage: bash bench/rooted.sh [ROUNDS] [SIZES]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2} sizes=${2:-8B,1KB,64KB,1MB,16MB}
go build -o bin/ ./cmd/bench
lscpu | grep -E 'Model name|^CPU\(s\)' | tr -s ' '
for round in $(seq "$rounds"); do
	echo "# round $round"
	bin/bench collectives -np 2,4 -sizes "$sizes" -ops reduce,gather,scatter,alltoall -variants default,tcp |
		sed -n '/against the competitors/,/^$/p'
done
