#!/usr/bin/env bash
# The seed-003 table: the same training work on np = 1, 2, 4 ranks with one
# compute thread each, run time and speed-up per row, then PyTorch DDP
# (gloo) on the same work in the same run. Needs dataset-fashion-mnist and
# python3-torch. Usage: bash bench/train_scaling.sh [mnist|cifarnet]
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-mnist}
if [ "$model" = mnist ]; then n=12800; data=(); batch=64; else n=2560; data=(--synthetic); batch=128; fi
go build -o bin/ ./cmd/gorun ./cmd/train
printf '%-11s %4s %10s %10s %8s\n' tool np seconds img/s speedup
base=""
# Ranks of one machine talk through shared memory by default; the tcp rows
# force loopback TCP (GORUN_TRANSPORT=tcp) for comparison.
for run in "shm 1" "shm 2" "shm 4" "tcp 2" "tcp 4"; do
  set -- $run
  out=$(GORUN_TRANSPORT=${1/shm/auto} bin/gorun -np $2 -no-prefix bin/train --model $model "${data[@]}" --train-samples $n --test-samples 1000 \
        --epochs 1 --threads 1 --batch-size $batch --optimizer sgd --lr 0.01 --momentum 0.9 --scheduler none --augment=false --progress lines 2>&1)
  line=$(grep '^Epoch 1:' <<<"$out")
  secs=$(sed -E 's/.*, ([0-9.]+) s, .*/\1/' <<<"$line")
  ips=$(sed -E 's/.* ([0-9.]+) img\/s/\1/' <<<"$line")
  base=${base:-$ips}
  printf '%-11s %4d %10s %10s %7.2fx\n' "gorun $1" $2 "$secs" "$ips" "$(echo "$ips / $base" | bc -l)"
  if [ "$2" = 2 ]; then grep -E '^  (forward|backward|all-reduce|optimizer) |^Gradient' <<<"$out" | sed 's/^/    /'; fi
done
for np in 1 2 4; do
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/competitors/torch_ddp.py $model $n $np 2>/dev/null | grep torch-ddp
done
