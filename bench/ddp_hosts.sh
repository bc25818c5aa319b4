#!/bin/bash
# Data-parallel training across simulated hosts: HOSTS network namespaces
# (default 2) × NP ranks (default 1), one thread a rank, seed 003's work
# (the MNIST net on the first 12,800 Fashion-MNIST images, batch 64 a
# rank, SGD with momentum, one epoch; CIFARNet on 2,560 random images,
# batch 128), gorun's train against PyTorch DDP over gloo
# (bench/competitors/torch_ddp.py) in the same namespaces, alternating,
# for each kind of link in LINKS ("unshaped", or bench cluster's flags
# joined by commas: "-rate,1gbit,-delay,1ms"). Images per second from
# rank 0. Needs root and iproute2; Debian's python3-torch for gloo.
#   [HOSTS=2] [NP=1] [LINKS=...] bash bench/ddp_hosts.sh [MODEL] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-mnist}
rounds=${2:-2}
hosts=${HOSTS:-2}
np=${NP:-1}
links=${LINKS:-unshaped -rate,1gbit -rate,1gbit,-delay,1ms}
case $model in
mnist) n=12800 args=(--batch-size 64 --train-samples 12800) ;;
cifarnet) n=2560 args=(--batch-size 128 --synthetic --train-samples 2560) ;;
*) echo "model $model: want mnist or cifarnet" >&2; exit 2 ;;
esac
go build -o bin/ ./cmd/gorun ./cmd/bench ./cmd/train
lscpu | grep -E 'Model name|^CPU\(s\)|CPU family|^Model:' | tr -s ' '
for link in $links; do
	shape=()
	[ "$link" != unshaped ] && IFS=, read -r -a shape <<<"$link"
	for round in $(seq "$rounds"); do
		echo "## $link round $round gorun"
		bin/bench cluster -hosts "$hosts" -np "$np" "${shape[@]}" -- bin/train --model "$model" --epochs 1 --threads 1 \
			--test-samples 1000 --progress lines --optimizer sgd --lr 0.01 --momentum 0.9 --scheduler none --augment=false "${args[@]}" 2>&1 |
			grep -E '^# |Epoch 1:'
		echo "## $link round $round pytorch"
		bin/bench cluster -hosts "$hosts" -np "$np" "${shape[@]}" -each -- /usr/bin/python3 bench/competitors/torch_ddp.py "$model" "$n" $((hosts * np)) 2>&1 |
			grep -E '^# |torch-ddp'
	done
done
