#!/bin/bash
# The image pipeline, gorun against torchvision's DataLoader with PIL in
# the same run, alternating: decoding, RandomResizedCrop(224), flip and
# normalisation of an image folder's training images (and evaluation's
# Resize(256)+CenterCrop(224) with EVAL=1), with 1 and 2 workers; gorun
# with libjpeg-turbo (loaded at run time when libturbojpeg0 is installed)
# and with Go's image/jpeg (GORUN_JPEG=go), from the folder and from
# shards packed from it (bin/shard, 256 samples each, files as they are).
# One JSON line per run.
#   bash bench/data.sh [DIR [ROUNDS [IMAGES]]]
# DIR defaults to /tmp/gorun-photos, written by bench/gen_photos.py
# (photo-like JPEGs of ImageNet's sizes) when it does not exist.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/tmp/gorun-photos} rounds=${2:-3} images=${3:-2048}
[ -d "$dir" ] || /usr/bin/python3 bench/gen_photos.py "$dir" 1024 64 8
go build -o /tmp/gorun-bench-bin/ ./cmd/bench ./cmd/shard
[ -f "$dir-shards/shards.json" ] || /tmp/gorun-bench-bin/shard --data "$dir" --out "$dir-shards" --samples 256
lscpu | grep -E 'Model name|^CPU\(s\)' | tr -s ' '
eval=()
[ "${EVAL:-}" = 1 ] && eval=(--eval)
for round in $(seq "$rounds"); do
	for workers in 1 2; do
		/tmp/gorun-bench-bin/bench data -data "$dir" -workers "$workers" -images "$images" -json ${eval[@]/--/-}
		GORUN_JPEG=go /tmp/gorun-bench-bin/bench data -data "$dir" -workers "$workers" -images "$images" -json ${eval[@]/--/-}
		/tmp/gorun-bench-bin/bench data -data "$dir-shards" -workers "$workers" -images "$images" -json ${eval[@]/--/-}
		/usr/bin/python3 bench/competitors/torch_data.py "$dir" "$workers" "$images" "${eval[@]}"
	done
done
