#!/usr/bin/env bash
# GPipe on StagedCIFARNet, 3 stages (one rank each, one compute thread),
# microbatches m = 1, 2, 4, 8: throughput and the last stage's measured
# bubble beside the ideal (p-1)/(m+p-1); the unsplit model on one rank for
# reference. Usage: bash bench/pipeline.sh [train-samples]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1024}
go build -o bin/ ./cmd/gorun ./cmd/train
common=(--model cifarnet --synthetic --train-samples "$n" --test-samples 128 --epochs 1 --threads 1 --batch-size 128 --progress lines)
printf '%-22s %8s %8s  %-44s %s\n' run seconds img/s "idle per stage" "ideal bubble"
out=$(bin/train "${common[@]}")
line=$(grep '^Epoch 1:' <<<"$out")
printf '%-22s %8s %8s  %-44s %s\n' "unsplit, 1 rank" "$(sed -E 's/.*, ([0-9.]+) s, .*/\1/' <<<"$line")" "$(sed -E 's/.* ([0-9.]+) img\/s/\1/' <<<"$line")" - -
run() { # schedule, microbatches
  out=$(bin/gorun -np 3 -no-prefix bin/train "${common[@]}" --pipeline 3 --schedule $1 --microbatches $2)
  line=$(grep '^Epoch 1:' <<<"$out")
  bub=$(grep "^Pipeline idle" <<<"$out" | sed -E "s/.*: (.*) \(GPipe bubble .* = ([0-9.]+%)\)/\1;\2/")
  printf '%-22s %8s %8s  %-44s %s\n' "$1 p=3 m=$2" "$(sed -E 's/.*, ([0-9.]+) s, .*/\1/' <<<"$line")" "$(sed -E 's/.* ([0-9.]+) img\/s/\1/' <<<"$line")" "${bub%;*}" "${bub#*;}"
  grep '^Peak memory' <<<"$out" | sed 's/^/    /'
}
for m in 1 2 4 8; do run gpipe $m; done
run 1f1b 8

# Automatic cuts of models without stages of their own: CIFARNet's 22
# top-level layers into 2 stages by measured time (the default) and by
# parameter count, GPipe m=4.
balance() { # balance
  out=$(bin/gorun -np 2 -no-prefix bin/train "${common[@]}" --pipeline 2 --microbatches 4 --balance $1)
  line=$(grep '^Epoch 1:' <<<"$out")
  bub=$(grep "^Pipeline idle" <<<"$out" | sed -E "s/.*: (.*) \(GPipe bubble .* = ([0-9.]+%)\)/\1;\2/")
  printf '%-22s %8s %8s  %-44s %s\n' "p=2 m=4 by $1" "$(sed -E 's/.*, ([0-9.]+) s, .*/\1/' <<<"$line")" "$(sed -E 's/.* ([0-9.]+) img\/s/\1/' <<<"$line")" "${bub%;*}" "${bub#*;}"
  grep -E '^  stage|^Peak memory' <<<"$out" | sed 's/^/    /'
}
balance time
balance params
