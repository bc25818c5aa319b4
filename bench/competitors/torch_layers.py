"""The competitor side of gorun's compute benchmarks, run in the same session:
SGEMM through NumPy/OpenBLAS and PyTorch, and CIFARNet's convolutions forward
+ backward in PyTorch, at 1 and 2 threads.

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/competitors/torch_layers.py 1
    OPENBLAS_NUM_THREADS=2 /usr/bin/python3 bench/competitors/torch_layers.py 2

Compare with:
    go test ./model/gemm -run '^$' -bench 'Sgemm/best|MicroKernel'
    go test ./model/nn -run '^$' -bench ConvLayer
"""
import sys
import time

from common import allocator, openblas_core  # first, before torch: it picks PyTorch's memory allocator

import numpy as np
import torch

from common import timeit

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
torch.set_num_threads(threads)


print("threads", threads, "torch", torch.__version__, "OpenBLAS kernels", openblas_core, "allocator", allocator)
for name, m, n, k in [("square128", 128, 128, 128), ("square256", 256, 256, 256), ("square512", 512, 512, 512),
                      ("square1024", 1024, 1024, 1024), ("cifar_conv1", 64, 1024, 27), ("cifar_conv2", 128, 256, 576),
                      ("cifar_conv3", 256, 64, 1152), ("cifar_conv4", 512, 64, 2304)]:
    a = np.random.rand(m, k).astype(np.float32)
    b = np.random.rand(k, n).astype(np.float32)
    dt = timeit(lambda: a @ b)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    dt2 = timeit(lambda: ta @ tb)
    print("sgemm %-12s numpy/openblas %7.1f GFLOP/s   torch %7.1f GFLOP/s" % (name, 2 * m * n * k / dt / 1e9, 2 * m * n * k / dt2 / 1e9))

for name, cin, cout, hw in [("conv1_3x64x32", 3, 64, 32), ("conv2_64x128x16", 64, 128, 16),
                            ("conv3_128x256x8", 128, 256, 8), ("conv4_256x512x8", 256, 512, 8)]:
    conv = torch.nn.Conv2d(cin, cout, 3, padding=1)
    x = torch.randn(32, cin, hw, hw, requires_grad=True)
    dy = torch.randn(32, cout, hw, hw)

    def step():
        conv.zero_grad()
        x.grad = None
        conv(x).backward(dy)

    print("conv %-16s forward+backward %8.3f ms" % (name, timeit(step) * 1e3))
