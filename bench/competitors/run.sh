#!/usr/bin/env bash
# Measures all-reduce time for gorun (go test -bench, real processes over
# loopback TCP), gloo (PyTorch 1.13) and Open MPI over TCP, in one run, at
# the same sizes and world sizes. Needs: python3-torch, openmpi-bin,
# libopenmpi-dev (apt-get install). Usage: bash bench/competitors/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
sizes="8 4096 65536 1048576 16777216 67108864"
mkdir -p bin
mpicc -O2 -o bin/mpi_allreduce bench/competitors/mpi_allreduce.c
for np in 2 4; do
  go test ./comm -run '^$' -bench "^BenchmarkAllReduce$/np=$np/" -benchtime 2s -count 1 | grep '^Benchmark' \
    | awk -v np=$np '{ split($1, a, "bytes="); split(a[2], b, "-"); printf "gorun np=%d bytes=%s us=%.1f\n", np, b[1], $3/1000 }'
  /usr/bin/python3 bench/competitors/gloo_allreduce.py $np $sizes 2>/dev/null
  mpirun --allow-run-as-root --oversubscribe -np $np --mca btl self,tcp bin/mpi_allreduce $sizes 2>/dev/null
done
