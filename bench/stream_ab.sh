#!/usr/bin/env bash
# One-way streams before and after a change: `bench collectives` of two
# builds, alternating, on the sizes and collectives where senders run
# ahead of the root (Reduce, Gather, Broadcast; all-reduce for contrast).
# Usage: bash bench/stream_ab.sh OLD_BENCH NEW_BENCH [ROUNDS] [ARGS...]
# (build each with `go build -o DIR/ ./cmd/bench` in its checkout).
set -euo pipefail
old=$1 new=$2 rounds=${3:-3}
shift $(($# < 3 ? $# : 3))
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(-np 2 -sizes 64KB,1MB -ops reduce,gather,broadcast,all_reduce -variants tcp)
lscpu | grep -E 'Model name|^CPU family|^Model:|^CPU\(s\)' | tr -s ' '
for round in $(seq "$rounds"); do
	for side in old new; do
		bin=$old; [ $side = new ] && bin=$new
		echo "# round $round: $side ($bin ${args[*]})"
		"$bin" collectives -competitors=false "${args[@]}" | sed -n '/^# Summary/,$p'
	done
done
