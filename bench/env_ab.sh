#!/usr/bin/env bash
# One setting of the environment against another: `bench collectives` of
# one build, alternating the values of VAR, the order rotated each round
# (this VM's phases favour whichever runs first less often then), with
# the competitors in every run unless the arguments turn them off.
# Usage: bash bench/env_ab.sh VAR "VALUE1 VALUE2 ..." [ROUNDS] [ARGS...]
# e.g. bash bench/env_ab.sh GORUN_DIRECT_BYTES "-1 0" 6 -np 2,4 -sizes 128KB,1MB,16MB -ops alltoall
set -euo pipefail
cd "$(dirname "$0")/.."
var=$1 values=($2) rounds=${3:-3}
shift $(($# < 3 ? $# : 3))
go build -o bin/ ./cmd/bench
lscpu | grep -E 'Model name|^CPU family|^Model:|^CPU\(s\)' | tr -s ' '
for round in $(seq "$rounds"); do
	n=${#values[@]}
	for i in $(seq 0 $((n - 1))); do
		v=${values[$(((i + round - 1) % n))]}
		echo "# round $round: $var=$v"
		env "$var=$v" bin/bench collectives "$@" | sed -n '/^# Summary/,$p'
	done
done
