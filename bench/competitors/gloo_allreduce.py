#!/usr/bin/python3
"""Collective timing through PyTorch's gloo backend, for comparison with gorun.

Run with Debian's python3-torch (torch 1.13):
    /usr/bin/python3 bench/competitors/gloo_allreduce.py NP [iters=N] [op=OP] SIZE_BYTES... [op=OP SIZE_BYTES...]
OP is all_reduce (the default), broadcast, all_gather or barrier (sizes
are the whole buffer: the all-gather's result; a barrier's size is
ignored); iters=N times N calls per size (default: by size, 20 to 2000).
On one machine it spawns NP processes on loopback. Across hosts
it runs once per host, reading torchrun's variables: MASTER_ADDR,
MASTER_PORT, GROUP_RANK (the host's index) and LOCAL_WORLD_SIZE (processes
per host, NP in all), as `bench cluster -each` sets them; gloo uses the
host's one interface besides lo unless GLOO_SOCKET_IFNAME names one.
Rank 0 prints one line per size:
    gloo [op=OP] np=NP bytes=SIZE us=MICROSECONDS
(the slowest rank's mean time per call after a warm-up).
"""
import os
import sys
import time

from common import allocator  # first, before torch: it picks PyTorch's memory allocator
from common import one_interface

OPS = ("all_reduce", "broadcast", "all_gather", "barrier")


def iterations(size, iters):
    if iters:
        return iters
    return max(20, min(2000, int(2e8 / max(size, 1024))))


def number(what, text, least):
    """text as a whole number of at least least, else exit naming what."""
    try:
        n = int(text)
    except ValueError:
        n = None
    if n is None or n < least:
        sys.exit("gloo_allreduce.py: %s=%r: want a whole number, at least %d" % (what, text, least))
    return n


def parse(args):
    """[iters=N] [op=OP] SIZE... groups → N (0: by size), [(op, size)]."""
    op, out, iters = "all_reduce", [], 0
    for a in args:
        if a.startswith("iters="):
            iters = number("iters", a[6:], 1)
            continue
        if a.startswith("op="):
            op = a[3:]
            if op not in OPS:
                sys.exit("gloo_allreduce.py: op=%s: want one of %s" % (op, ", ".join(OPS)))
            continue
        out.append((op, number("size", a, 0)))
    if not out:
        sys.exit("gloo_allreduce.py: no sizes given (usage: NP [iters=N] [op=OP] SIZE_BYTES...)")
    return iters, out


def arguments(argv):
    """NP, iters and jobs from the command line, or exit saying what is wrong."""
    if len(argv) < 2:
        sys.exit("usage: gloo_allreduce.py NP [iters=N] [op=OP] SIZE_BYTES...")
    return (number("NP", argv[1], 1),) + parse(argv[2:])


if __name__ == "__main__":
    arguments(sys.argv)  # bad arguments stop here, before torch loads (seconds)

import torch  # noqa: E402 (after the arguments' check; spawned workers import it here too)
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def call(op, t, parts, np_):
    if op == "all_reduce":
        dist.all_reduce(t)
    elif op == "broadcast":
        dist.broadcast(t, 0)
    elif op == "all_gather":
        dist.all_gather(parts, t)
    else:
        dist.barrier()


def worker(local, np_, per_host, node, iters, jobs, init):
    rank = node * per_host + local
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=np_)
    for op, size in jobs:
        count = max(size // 4, 2)
        if op == "all_gather":
            count = max(count // np_, 1)
            size = count * np_ * 4
        t = torch.ones(count, dtype=torch.float32)
        parts = [torch.empty_like(t) for _ in range(np_)] if op == "all_gather" else None
        for _ in range(5):
            call(op, t, parts, np_)
        dist.barrier()
        n = iterations(size, iters)
        start = time.perf_counter()
        for _ in range(n):
            call(op, t, parts, np_)
        per = torch.tensor([(time.perf_counter() - start) / n])
        dist.all_reduce(per, op=dist.ReduceOp.MAX)
        if rank == 0:
            tag = "" if op == "all_reduce" else "op=%s " % op
            print(f"gloo {tag}np={np_} bytes={size} us={per.item() * 1e6:.1f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    np_, iters, jobs = arguments(sys.argv)
    if "GROUP_RANK" in os.environ:
        per_host, node = int(os.environ["LOCAL_WORLD_SIZE"]), int(os.environ["GROUP_RANK"])
        if np_ % per_host:
            sys.exit("gloo_allreduce.py: NP %d is not a multiple of LOCAL_WORLD_SIZE %d" % (np_, per_host))
        init = "tcp://%s:%s" % (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"])
        os.environ.setdefault("GLOO_SOCKET_IFNAME", one_interface())
    else:
        per_host, node = np_, 0
        init = "tcp://127.0.0.1:%d" % (29000 + os.getpid() % 1000)
    mp.spawn(worker, args=(np_, per_host, node, iters, jobs, init), nprocs=per_host)
