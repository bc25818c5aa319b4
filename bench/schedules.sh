#!/usr/bin/env bash
# Pipeline schedules against each other: CIFARNet (batch 128) and
# ResNet-50 (batch 32, 224x224) cut into 2 stages, one rank and one
# compute thread per stage, m microbatches, every schedule in SCHEDULES,
# the order rotated from round to round. The cut is fixed, so that every
# schedule runs the same stages: CIFARNet before conv4 (the cut by
# measured time flips between runs here, the two stages' times being
# close either way), ResNet-50 before layer2.2 (where the cut by measured
# time falls: 994 / 1011 ms a microbatch of 8). Each run trains two epochs
# of generated data; the figures are the second epoch's (the first pays
# for first-touch page faults): images per second, idle time per stage,
# and peak RSS per stage (evaluation runs batches no larger than a
# microbatch, so the peak is training's).
#
# Usage: bash bench/schedules.sh [rounds]
#   MODELS="cifarnet resnet50" MICRO="4 8" SCHEDULES="1f1b zb"
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
models=${MODELS:-cifarnet resnet50}
micro=${MICRO:-4 8}
read -r -a schedules <<<"${SCHEDULES:-1f1b zb}"
go build -o bin/ ./cmd/gorun ./cmd/train
lscpu | grep -E '^Model name|^CPU family|^Model:' | tr -s ' ' | paste -sd ';'

run() { # model, microbatches, schedule
  local args samples batch
  case $1 in
  cifarnet) samples=1024 batch=128 args=(--split 11 --test-samples 32) ;;
  resnet50) samples=128 batch=32 args=(--split 9 --test-samples 8 --optimizer sgd --lr 0.01) ;;
  *) echo "unknown model $1" >&2; exit 2 ;;
  esac
  args+=(--batch-size "$batch" --test-batch-size $((batch / $2)))
  out=$(bin/gorun -np 2 -no-prefix bin/train --model "$1" --synthetic --train-samples "$samples" \
    --epochs 2 --threads 1 --progress lines "${args[@]}" --pipeline 2 --microbatches "$2" --schedule "$3" 2>&1)
  secs=$(grep '^Epoch 2:' <<<"$out" | sed -E 's/.*, ([0-9.]+) s, .*/\1/')
  idle=$(grep '^Pipeline idle' <<<"$out" | sed -E 's/.*: stage 0 ([0-9.]+%), stage 1 ([0-9.]+%) \(.*= ([0-9.]+%)\)/\1 \/ \2 (ideal \3)/')
  mem=$(grep '^Peak memory' <<<"$out" | sed -E 's/.*: stage 0 ([0-9]+) MiB, stage 1 ([0-9]+) MiB/\1 \/ \2/')
  printf '%-9s m=%-2s %-6s %8s s %8.2f img/s  idle %-32s peak RSS %s MiB\n' "$1" "$2" "$3" "$secs" \
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
