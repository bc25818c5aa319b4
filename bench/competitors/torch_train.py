"""The PyTorch side of gorun's trainer benchmarks, run in the same session.

Throughput: training steps (forward, loss, backward, optimizer) of the MNIST
net at batch 64, CIFARNet at batch 128 and torchvision's resnet18 (10
classes, CIFAR-10's 32x32 images, seed 002) at batch 32, and inference of
the last two (eager, and frozen by torch.jit.optimize_for_inference), on
random data, at the thread count given (compare with
`go test ./model/zoo -run '^$' -bench 'TrainStep|Inference'`):

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/competitors/torch_train.py speed 1 [MODELS_REGEXP]

Interleaving (PyTorch's speed varies between runs on a shared VM):

    /usr/bin/python3 bench/competitors/torch_train.py steps 2

Accuracy and memory: PyTorch's MNIST example (seed 004: Adadelta lr 1.0,
StepLR gamma 0.7, batch 64, test batch 1000) on Fashion-MNIST for 3
epochs, printing test accuracy per epoch, the time and peak RSS (compare
with `train --threads N`):

    OPENBLAS_NUM_THREADS=2 /usr/bin/python3 bench/competitors/torch_train.py fashion 2
"""
import os
import resource
import sys
import time

from common import allocator, openblas_core  # first, before torch: it picks PyTorch's memory allocator

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "model", "testdata"))
from torchref import CIFARNet, MNISTNet  # noqa: E402
from common import idx, timeit  # noqa: E402

mode = sys.argv[1] if len(sys.argv) > 1 else "speed"
threads = int(sys.argv[2]) if len(sys.argv) > 2 else 1
torch.set_num_threads(threads)
torch.manual_seed(1)

print("torch", torch.__version__, "threads", threads, "oneDNN", torch.backends.mkldnn.is_available(), "OpenBLAS kernels", openblas_core, "allocator", allocator)


def speed():
    import re
    import torchvision
    # A further argument: a regular expression of the models to time
    # (bench/workshop_models.sh's MODELS), all three by default.
    only = re.compile(sys.argv[3] if len(sys.argv) > 3 else ".*")
    for name, net, batch, shape, opt in [
        ("mnist", MNISTNet, 64, (1, 28, 28), "adadelta"),
        ("cifarnet", CIFARNet, 128, (3, 32, 32), "sgd"),
        ("resnet18", lambda: torchvision.models.resnet18(num_classes=10), 32, (3, 32, 32), "sgd"),
    ]:
        if not only.fullmatch(name):
            continue
        net = net()
        x = torch.randn(batch, *shape)
        y = torch.randint(0, 10, (batch,))
        o = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        net.train()

        def step():
            o.zero_grad()
            out = net(x)
            loss = F.nll_loss(out, y) if name == "mnist" else F.cross_entropy(out, y)
            loss.backward()
            o.step()

        dt = timeit(step, 3.0)
        print("train %-9s batch %3d: %7.1f img/s" % (name, batch, batch / dt))
        if name != "mnist":
            net.eval()
            with torch.no_grad():
                dt = timeit(lambda: net(x), 3.0)
                print("infer %-9s batch %3d: %7.1f img/s" % (name, batch, batch / dt))
                # Frozen, as gorun's evaluation runs (nn.Freeze): TorchScript
                # with batch norms folded and oneDNN's weights prepacked.
                frozen = torch.jit.optimize_for_inference(torch.jit.script(net))
                dt = timeit(lambda: frozen(x), 3.0)
                print("infer-frozen %-9s batch %3d: %7.1f img/s" % (name, batch, batch / dt))


def fashion(epochs=3):
    d = "/usr/share/datasets/fashion-mnist"
    norm = lambda a: (torch.from_numpy(a.astype(np.float32) / 255)[:, None] - 0.1307) / 0.3081
    xtr, ytr = norm(idx(d + "/train-images-idx3-ubyte.gz")), torch.from_numpy(idx(d + "/train-labels-idx1-ubyte.gz").astype(np.int64))
    xte, yte = norm(idx(d + "/t10k-images-idx3-ubyte.gz")), torch.from_numpy(idx(d + "/t10k-labels-idx1-ubyte.gz").astype(np.int64))
    model = MNISTNet()
    opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    t0 = time.perf_counter()
    for epoch in range(1, epochs + 1):
        model.train()
        perm = torch.randperm(len(ytr))
        te = time.perf_counter()
        for i in range(0, len(ytr), 64):
            idxs = perm[i:i + 64]
            opt.zero_grad()
            loss = F.nll_loss(model(xtr[idxs]), ytr[idxs])
            loss.backward()
            opt.step()
        secs = time.perf_counter() - te
        model.eval()
        correct, total_loss = 0, 0.0
        with torch.no_grad():
            for i in range(0, len(yte), 1000):
                out = model(xte[i:i + 1000])
                total_loss += F.nll_loss(out, yte[i:i + 1000], reduction="sum").item()
                correct += (out.argmax(1) == yte[i:i + 1000]).sum().item()
        sched.step()
        print("epoch %d: %.1f s (%.0f img/s), test loss %.4f, accuracy %d/%d (%.2f%%)" % (
            epoch, secs, len(ytr) / secs, total_loss / len(yte), correct, len(yte), 100 * correct / len(yte)))
    print("Training time = %.2f s" % (time.perf_counter() - t0))
    print("Peak memory (RSS) = %.0f MiB" % (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))


def steps(n=60):
    """n MNIST-net training steps after 5 warm-up ones, for interleaving with
    `go test ./model/zoo -run '^$' -bench TrainStep/mnist/batch=64/threads=2 -benchtime 60x`."""
    net = MNISTNet()
    o = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x, y = (torch.rand(64, 1, 28, 28) - 0.1307) / 0.3081, torch.randint(0, 10, (64,))
    for i in range(5 + n):
        if i == 5:
            t0 = time.perf_counter()
        o.zero_grad()
        F.nll_loss(net(x), y).backward()
        o.step()
    print("train mnist     batch  64: %7.1f img/s (%d steps)" % (64 * n / (time.perf_counter() - t0), n))


def resnet50(what):
    """torchvision's resnet50 at batch 32, 224x224, random data: training
    steps (SGD with momentum; "recompute": every Bottleneck under
    torch.utils.checkpoint, as gorun's --recompute) or evaluation-mode
    forwards; prints img/s over at least 3 steps after a warm-up one, and
    the peak RSS (compare with `go test ./model/zoo -run '^$' -bench
    'TrainStep/resnet50|Inference/resnet50'`, bench/resnet50.sh runs both,
    alternating)."""
    import torchvision
    import torch.utils.checkpoint
    net = torchvision.models.resnet50()
    x, y = torch.randn(32, 3, 224, 224), torch.randint(0, 1000, (32,))
    if what == "recompute":
        class Checkpointed(torch.nn.Module):
            def __init__(self, block):
                super().__init__()
                self.block = block

            def forward(self, h):
                return torch.utils.checkpoint.checkpoint(self.block, h, use_reentrant=False)
        for layer in (net.layer1, net.layer2, net.layer3, net.layer4):
            for i in range(len(layer)):
                layer[i] = Checkpointed(layer[i])
    if what in ("train", "recompute"):
        o = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        net.train()

        def step():
            o.zero_grad()
            F.cross_entropy(net(x), y).backward()
            o.step()
    else:
        net.eval()

        def step():
            with torch.no_grad():
                net(x)
    dt = timeit(step, 10.0)
    print("torch resnet50 %s batch 32 threads %d: %.2f img/s, peak RSS %.0f MiB" % (
        what, threads, 32 / dt, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))


{"speed": speed, "fashion": fashion, "steps": steps,
 "resnet50-train": lambda: resnet50("train"), "resnet50-recompute": lambda: resnet50("recompute"),
 "resnet50-infer": lambda: resnet50("infer")}[mode]()
