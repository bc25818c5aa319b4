#!/usr/bin/python3
"""All-reduce timing through PyTorch's gloo backend, for comparison with gorun.

Run with Debian's python3-torch (torch 1.13):
    /usr/bin/python3 bench/competitors/gloo_allreduce.py NP SIZE_BYTES... 
It spawns NP processes on loopback; rank 0 prints one line per size:
    gloo np=NP bytes=SIZE us=MICROSECONDS
(the slowest rank's mean time per call after a warm-up).
"""
import os
import sys
import time

from common import allocator  # first, before torch: it picks PyTorch's memory allocator

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def iterations(size):
    return max(20, min(2000, int(2e8 / max(size, 1024))))


def worker(rank, np_, sizes, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=np_)
    for size in sizes:
        t = torch.ones(max(size // 4, 2), dtype=torch.float32)
        for _ in range(5):
            dist.all_reduce(t)
        dist.barrier()
        n = iterations(size)
        start = time.perf_counter()
        for _ in range(n):
            dist.all_reduce(t)
        per = torch.tensor([(time.perf_counter() - start) / n])
        dist.all_reduce(per, op=dist.ReduceOp.MAX)
        if rank == 0:
            print(f"gloo np={np_} bytes={size} us={per.item() * 1e6:.1f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    np_ = int(sys.argv[1])
    sizes = [int(s) for s in sys.argv[2:]]
    port = 29000 + os.getpid() % 1000
    mp.spawn(worker, args=(np_, sizes, port), nprocs=np_)
