#!/usr/bin/env bash
# Small all-reduces at np = 2 through shared memory: two gorun builds and
# Open MPI's vader, alternated round by round, so that all three meet the
# same stretch of a noisy machine (on the 2-core development VM the same
# build runs 2-3x faster in some minutes than in others). Each line is one
# job: size:µs per call.
#
# Usage: bash bench/alternate.sh OLD_BIN NEW_BIN [ROUNDS] [SIZES]
#   OLD_BIN, NEW_BIN: directories holding gorun and bench of each build
#   (go build -o DIR/ ./cmd/gorun ./cmd/bench; OLD_BIN may be "-" to skip)
#   SIZES: as bench collectives -sizes takes them (default 8B,64B,512B,4KB)
# Needs openmpi-bin and libopenmpi-dev for the vader rows.
set -euo pipefail
cd "$(dirname "$0")/.."
old=$1 new=$2 rounds=${3:-5} sizes=${4:-8B,64B,512B,4KB}
mpi=$(mktemp -d)
trap 'rm -rf "$mpi"' EXIT
mpicc -O2 -o "$mpi/mpi_allreduce" bench/competitors/mpi_allreduce.c
bytes() { case $1 in *MB) echo $((${1%MB} << 20)) ;; *KB) echo $((${1%KB} << 10)) ;; *B) echo "${1%B}" ;; esac; }
for round in $(seq "$rounds"); do
  for build in "old $old" "new $new"; do
    set -- $build
    [ "$2" = - ] && continue
    "$2/gorun" -np 2 "$2/bench" collectives -in-job -sizes "$sizes" -ops all_reduce -iters 20000 -warmup 2000 \
      -competitors=false -csv "$mpi/r.csv" >"$mpi/log" 2>&1 || { cat "$mpi/log"; exit 1; }
    printf 'round %d %-5s %s\n' "$round" "$1" "$(tail -n +2 "$mpi/r.csv" | awk -F, '{printf "%s:%s ", $3, $8}')"
  done
  line=""
  for s in ${sizes//,/ }; do
    us=$(mpirun --allow-run-as-root -np 2 --mca btl self,vader "$mpi/mpi_allreduce" "$(bytes "$s")" | grep -o 'us=[0-9.]*')
    line+="$(bytes "$s"):${us#us=} "
  done
  printf 'round %d %-5s %s\n' "$round" vader "$line"
done
