#!/usr/bin/env bash
# Two gorun builds alternated round by round, so that both meet the same
# stretch of a noisy machine: the all-reduce matrix through shared memory
# and over TCP at np = 2 and 4, and data-parallel training of the MNIST
# net (np = 2, generated data). Each line is one job: size:µs per call, or
# the epoch's img/s. For a change that must not change speed.
#
# Usage: bash bench/ab.sh OLD_BIN NEW_BIN [ROUNDS] [SIZES]
#   OLD_BIN, NEW_BIN: directories holding gorun, bench and train of each
#   build (go build -o DIR/ ./cmd/gorun ./cmd/bench ./cmd/train)
set -euo pipefail
old=$1 new=$2 rounds=${3:-3} sizes=${4:-8B,4KB,64KB,1MB,16MB}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cpu="$(lscpu | sed -n 's/^Model name: *//p'), family $(lscpu | sed -n 's/^CPU family: *//p') model $(lscpu | sed -n 's/^Model: *//p')"
echo "# $(date -u +%FT%TZ) $cpu ($(nproc) cores); sizes $sizes"
for round in $(seq "$rounds"); do
  for build in "old $old" "new $new"; do
    set -- $build
    for transport in auto tcp; do
      for np in 2 4; do
        GORUN_TRANSPORT=$transport "$2/gorun" -np "$np" "$2/bench" collectives -in-job -sizes "$sizes" -ops all_reduce \
          -warmup 50 -competitors=false -csv "$tmp/r.csv" >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
        printf 'round %d %-3s %-4s np=%d %s\n' "$round" "$1" "$transport" "$np" \
          "$(tail -n +2 "$tmp/r.csv" | awk -F, '{printf "%s:%s ", $3, $8}')"
      done
    done
    "$2/gorun" -np 2 "$2/train" --synthetic --epochs 1 --train-samples 12800 --test-samples 1000 --progress lines >"$tmp/log" 2>&1 ||
      { cat "$tmp/log"; exit 1; }
    printf 'round %d %-3s train mnist np=2 %s\n' "$round" "$1" "$(grep -o '[0-9]* img/s' "$tmp/log" | tail -1)"
  done
done
