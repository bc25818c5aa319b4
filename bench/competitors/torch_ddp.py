"""PyTorch DDP (gloo) on the work bench/train_scaling.sh gives gorun: the MNIST
net on the first N Fashion-MNIST training images, batch 64 per rank, one
thread per rank, SGD momentum 0.9, one epoch; prints the epoch's time and
images per second from rank 0. It spawns the ranks itself (Debian's
torchrun fails on its Python 3.11):

    /usr/bin/python3 bench/competitors/torch_ddp.py mnist 12800 2
    /usr/bin/python3 bench/competitors/torch_ddp.py cifarnet 2560 4

Started once per host with the variables torchrun gives a host's agent
(MASTER_ADDR, MASTER_PORT, GROUP_RANK, LOCAL_WORLD_SIZE; `bench cluster
-each` sets them), it spawns that host's LOCAL_WORLD_SIZE ranks of the
N-rank job instead:

    bin/bench cluster -hosts 2 -np 1 -each -- /usr/bin/python3 bench/competitors/torch_ddp.py mnist 12800 2
"""
import os
import sys
import time

from common import allocator  # first, before torch: it picks PyTorch's memory allocator

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "model", "testdata"))
from torchref import CIFARNet, MNISTNet  # noqa: E402
from common import idx, one_interface  # noqa: E402

model_name, n, world = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


def main(local, first, addr, port):
    rank = first + local
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = addr, str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1)
    train(rank)
    dist.destroy_process_group()


def train(rank):
    if model_name == "mnist":
        d = "/usr/share/datasets/fashion-mnist"
        x = (torch.from_numpy(idx(d + "/train-images-idx3-ubyte.gz")[:n].astype(np.float32) / 255)[:, None] - 0.1307) / 0.3081
        y = torch.from_numpy(idx(d + "/train-labels-idx1-ubyte.gz")[:n].astype(np.int64))
        net, batch, loss_fn = MNISTNet(), 64, F.nll_loss
    else:  # random CIFAR-shaped data: the work, not the accuracy, is compared
        x, y = torch.randn(n, 3, 32, 32), torch.randint(0, 10, (n,))
        net, batch, loss_fn = CIFARNet(), 128, F.cross_entropy
    model = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    sampler = torch.utils.data.DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=True, seed=1)
    sampler.set_epoch(1)
    mine = list(sampler)
    dist.barrier()
    t0 = time.perf_counter()
    for i in range(0, len(mine), batch):
        b = mine[i:i + batch]
        opt.zero_grad()
        loss_fn(model(x[b]), y[b]).backward()
        opt.step()
    dist.barrier()
    secs = time.perf_counter() - t0
    if rank == 0:
        print("torch-ddp %s np=%d: %d images in %.2f s, %.0f img/s (%s)" % (model_name, world, len(mine) * world, secs, len(mine) * world / secs, allocator))


if __name__ == "__main__":
    import socket
    import torch.multiprocessing as mp
    if "GROUP_RANK" in os.environ:  # one host's agent
        os.environ.setdefault("GLOO_SOCKET_IFNAME", one_interface())
        local = int(os.environ["LOCAL_WORLD_SIZE"])
        mp.spawn(main, args=(int(os.environ["GROUP_RANK"]) * local, os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])), nprocs=local)
    else:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        mp.spawn(main, args=(0, "127.0.0.1", port), nprocs=world)
