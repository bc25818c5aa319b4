#!/usr/bin/env bash
# Pipeline schedules against each other: CIFARNet (batch 128) and
# ResNet-50 (batch 32, 224x224) cut into 2 stages, one rank and one
# compute thread per stage, m microbatches, every schedule in SCHEDULES,
# the order rotated from round to round. The cut is fixed, so that every
# schedule runs the same stages: CIFARNet before conv4 (the cut by
# measured time flips between runs here, the two stages' times being
# close either way), ResNet-50 before layer2.2 (where the cut by measured
# time falls: 994 / 1011 ms a microbatch of 8). The interleaved schedule
# (two chunks per stage) runs the cut its planner chose by measured time
# on 2026-11-26 (train's description of the stages, each stage's chunks
# within 1% of each other): CIFARNet 4,10,14 (m = 4) and 5,11,12 (m = 8:
# conv4 alone in chunk 2), ResNet-50 5,10,15 (m = 4) and 6,10,15. Each run trains two epochs
# of generated data; the figures are the second epoch's (the first pays
# for first-touch page faults): images per second, idle time per stage,
# and peak RSS per stage (evaluation runs batches no larger than a
# microbatch, so the peak is training's).
#
# Usage: bash bench/schedules.sh [rounds]
#   MODELS="cifarnet resnet50" MICRO="4 8" SCHEDULES="1f1b zb zb-h2 interleaved"
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
models=${MODELS:-cifarnet resnet50}
micro=${MICRO:-4 8}
read -r -a schedules <<<"${SCHEDULES:-1f1b zb}"
go build -o bin/ ./cmd/gorun ./cmd/train
lscpu | grep -E '^Model name|^CPU family|^Model:' | tr -s ' ' | paste -sd ';'

run() { # model, microbatches, schedule
  local args samples batch split
  case $1/$3/$2 in
  cifarnet/interleaved/4) split=4,10,14 ;;
  cifarnet/interleaved/*) split=5,11,12 ;;
  cifarnet/*) split=11 ;;
  resnet50/interleaved/4) split=5,10,15 ;;
  resnet50/interleaved/*) split=6,10,15 ;;
  resnet50/*) split=9 ;;
  esac
  case $1 in
  cifarnet) samples=1024 batch=128 args=(--split "$split" --test-samples 32) ;;
  resnet50) samples=128 batch=32 args=(--split "$split" --test-samples 8 --optimizer sgd --lr 0.01) ;;
  *) echo "unknown model $1" >&2; exit 2 ;;
  esac
  args+=(--batch-size "$batch" --test-batch-size $((batch / $2)))
  out=$(bin/gorun -np 2 -no-prefix bin/train --model "$1" --synthetic --train-samples "$samples" \
    --epochs 2 --threads 1 --progress lines "${args[@]}" --pipeline 2 --microbatches "$2" --schedule "$3" 2>&1)
  secs=$(grep '^Epoch 2:' <<<"$out" | sed -E 's/.*, ([0-9.]+) s, .*/\1/')
  idle=$(grep '^Pipeline idle' <<<"$out" | sed -E 's/.*: stage 0 ([0-9.]+%), stage 1 ([0-9.]+%) \(.*= ([0-9.]+%)\)/\1 \/ \2 (ideal \3)/')
  mem=$(grep '^Peak memory' <<<"$out" | sed -E 's/.*: stage 0 ([0-9]+) MiB, stage 1 ([0-9]+) MiB/\1 \/ \2/')
  printf '%-9s m=%-2s %-11s %8s s %8.2f img/s  idle %-32s peak RSS %s MiB\n' "$1" "$2" "$3" "$secs" \
    "$(awk -v n="$samples" -v s="$secs" 'BEGIN{print n/s}')" "$idle" "$mem"
}

for r in $(seq 1 "$rounds"); do
  echo "# round $r"
  for model in $models; do
    for m in $micro; do
      n=${#schedules[@]}
      for i in $(seq 0 $((n - 1))); do
        run "$model" "$m" "${schedules[$(((i + r) % n))]}"
      done
    done
  done
done
