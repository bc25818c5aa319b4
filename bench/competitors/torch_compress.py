"""PyTorch DDP (gloo, 2 ranks, one thread each) with its gradient
compression hooks, on the work `train --grad-compression` does in gorun:
the MNIST net on Fashion-MNIST, batch 64 per rank, Adadelta lr 1.0 with
StepLR gamma 0.7 (seed 004), the test set evaluated after each epoch.
KIND is none, fp16, bf16 (fp16_compress_hook, bf16_compress_hook) or
powersgd:R[:START] (powerSGD_hook at matrix_approximation_rank R, from
step START, default 0; min_compression_rate 2, error feedback and warm
start on; with one gradient bucket, as the hook's all-reduces reach gloo
out of order across ranks with two). Prints rank 0's epochs, the training time and the bytes the
hook handed to all-reduce per step (counted at dist.all_reduce). It spawns
the ranks itself (Debian's torchrun fails on its Python 3.11); IMAGES
limits the training images (for a quick try):

    /usr/bin/python3 bench/competitors/torch_compress.py powersgd:2 3
"""
import os
import sys
import time

from common import allocator  # first, before torch: it picks PyTorch's memory allocator

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "model", "testdata"))
from torchref import MNISTNet  # noqa: E402
from common import idx  # noqa: E402

kind = sys.argv[1] if len(sys.argv) > 1 else "none"
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
world = 2
wire = [0]


def counting(all_reduce):
    def f(tensor, *args, **kwargs):
        wire[0] += tensor.numel() * tensor.element_size()
        return all_reduce(tensor, *args, **kwargs)
    return f


def main(rank, port):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    dist.all_reduce = counting(dist.all_reduce)
    torch.manual_seed(1)
    d = "/usr/share/datasets/fashion-mnist"
    norm = lambda a: (torch.from_numpy(a.astype(np.float32) / 255)[:, None] - 0.1307) / 0.3081
    xtr, ytr = norm(idx(d + "/train-images-idx3-ubyte.gz")), torch.from_numpy(idx(d + "/train-labels-idx1-ubyte.gz").astype(np.int64))
    xte, yte = norm(idx(d + "/t10k-images-idx3-ubyte.gz")), torch.from_numpy(idx(d + "/t10k-labels-idx1-ubyte.gz").astype(np.int64))
    if kind.startswith("powersgd:"):
        # One gradient bucket: with DDP's two (a 1 MB first one), the
        # hook's chained all-reduces reach gloo in a different order on
        # each rank, and gloo aborts ("op.preamble.length <= op.nbytes") or
        # the job hangs (torch 1.13).
        dist._DEFAULT_FIRST_BUCKET_BYTES = 100 << 20
    model = torch.nn.parallel.DistributedDataParallel(MNISTNet(), bucket_cap_mb=100 if kind.startswith("powersgd:") else 25)
    if kind == "fp16":
        model.register_comm_hook(dist.group.WORLD, default_hooks.fp16_compress_hook)
    elif kind == "bf16":
        model.register_comm_hook(dist.group.WORLD, default_hooks.bf16_compress_hook)
    elif kind.startswith("powersgd:"):
        parts = kind.split(":")
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=int(parts[1]),
                                            start_powerSGD_iter=int(parts[2]) if len(parts) > 2 else 0,
                                            min_compression_rate=2, use_error_feedback=True, warm_start=True)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    elif kind != "none":
        sys.exit("kind %r: want none, fp16, bf16 or powersgd:R[:START]" % kind)
    opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    sampler = torch.utils.data.DistributedSampler(range(len(ytr)), num_replicas=world, rank=rank, shuffle=True, seed=1)
    t0, steps = time.perf_counter(), 0
    limit = int(os.environ.get("IMAGES", len(ytr)))
    for epoch in range(1, epochs + 1):
        sampler.set_epoch(epoch)
        mine = list(sampler)[:limit // world]
        model.train()
        te = time.perf_counter()
        for i in range(0, len(mine), 64):
            b = mine[i:i + 64]
            opt.zero_grad()
            F.nll_loss(model(xtr[b]), ytr[b]).backward()
            opt.step()
            steps += 1
        secs = time.perf_counter() - te
        sched.step()
        if rank == 0:
            model.eval()
            correct = 0
            with torch.no_grad():
                for i in range(0, len(yte), 1000):
                    correct += (model(xte[i:i + 1000]).argmax(1) == yte[i:i + 1000]).sum().item()
            print("torch-ddp %s epoch %d: %.1f s (%.0f img/s), accuracy %d/%d (%.2f%%)" % (
                kind, epoch, secs, len(mine) * world / secs, correct, len(yte), 100 * correct / len(yte)), flush=True)
        dist.barrier()
    if kind == "none":  # DDP's own reducer, not dist.all_reduce: every gradient, float32
        wire[0] = 4 * sum(p.numel() for p in model.parameters()) * steps
    if rank == 0:
        print("torch-ddp %s: allocator %s" % (kind, allocator))
        print("torch-ddp %s: training time %.2f s, %.2f MB a step handed to all-reduce (rank 0, mean over %d steps)" % (
            kind, time.perf_counter() - t0, wire[0] / steps / 1e6, steps))
    dist.destroy_process_group()


if __name__ == "__main__":
    import socket
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(main, args=(port,), nprocs=world)
