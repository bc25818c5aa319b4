"""The competitor side of gorun's compute benchmarks, run in the same session:
SGEMM through NumPy/OpenBLAS and PyTorch, and CIFARNet's convolutions forward
+ backward in PyTorch, at 1 and 2 threads.

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/competitors/torch_layers.py 1
    OPENBLAS_NUM_THREADS=2 /usr/bin/python3 bench/competitors/torch_layers.py 2
    OMP_NUM_THREADS=1 /usr/bin/python3 bench/competitors/torch_layers.py 1 resnet50
    OMP_NUM_THREADS=1 /usr/bin/python3 bench/competitors/torch_layers.py 1 resnet18

Compare with:
    go test ./model/gemm -run '^$' -bench 'Sgemm/best|MicroKernel'
    go test ./model/nn -run '^$' -bench ConvLayer
    go test ./model/nn -run '^$' -bench ResNet50Convs -benchtime 3x  (with "resnet50")
    go test ./model/nn -run '^$' -bench ResNet18Convs -benchtime 20x  (with "resnet18")

With "resnet50" it times ResNet-50's distinct convolutions alone (batch 32,
no bias; "resnet18": ResNet-18's on CIFAR-10's 32×32 images), forward
and forward + backward, in GFLOP/s as gorun's benchmark reports them; a further argument names one layer (bench/resnet50_convs.sh
alternates gorun and PyTorch layer by layer).
"""
import sys
import time

from common import allocator, openblas_core  # first, before torch: it picks PyTorch's memory allocator

import numpy as np
import torch

from common import timeit

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
torch.set_num_threads(threads)


RESNET50_CONVS = [  # name, in, out, kernel, stride, input size: model/nn's resnet50Convs
    ("stem_3x64_7x7s2_224", 3, 64, 7, 2, 224), ("l1_64x64_1x1_56", 64, 64, 1, 1, 56),
    ("l1_64x64_3x3_56", 64, 64, 3, 1, 56), ("l1_64x256_1x1_56", 64, 256, 1, 1, 56),
    ("l1_256x64_1x1_56", 256, 64, 1, 1, 56), ("l2_256x128_1x1_56", 256, 128, 1, 1, 56),
    ("l2_128x128_3x3s2_56", 128, 128, 3, 2, 56), ("l2_256x512_1x1s2_56", 256, 512, 1, 2, 56),
    ("l2_128x128_3x3_28", 128, 128, 3, 1, 28), ("l2_128x512_1x1_28", 128, 512, 1, 1, 28),
    ("l2_512x128_1x1_28", 512, 128, 1, 1, 28), ("l3_512x256_1x1_28", 512, 256, 1, 1, 28),
    ("l3_256x256_3x3s2_28", 256, 256, 3, 2, 28), ("l3_512x1024_1x1s2_28", 512, 1024, 1, 2, 28),
    ("l3_256x256_3x3_14", 256, 256, 3, 1, 14), ("l3_256x1024_1x1_14", 256, 1024, 1, 1, 14),
    ("l3_1024x256_1x1_14", 1024, 256, 1, 1, 14), ("l4_1024x512_1x1_14", 1024, 512, 1, 1, 14),
    ("l4_512x512_3x3s2_14", 512, 512, 3, 2, 14), ("l4_1024x2048_1x1s2_14", 1024, 2048, 1, 2, 14),
    ("l4_512x512_3x3_7", 512, 512, 3, 1, 7), ("l4_512x2048_1x1_7", 512, 2048, 1, 1, 7),
    ("l4_2048x512_1x1_7", 2048, 512, 1, 1, 7),
]

RESNET18_CONVS = [  # ResNet-18 on CIFAR-10's 32×32 images: model/nn's resnet18Convs
    ("stem_3x64_7x7s2_32", 3, 64, 7, 2, 32), ("l1_64x64_3x3_8", 64, 64, 3, 1, 8),
    ("l2_64x128_3x3s2_8", 64, 128, 3, 2, 8), ("l2_64x128_1x1s2_8", 64, 128, 1, 2, 8),
    ("l2_128x128_3x3_4", 128, 128, 3, 1, 4), ("l3_128x256_3x3s2_4", 128, 256, 3, 2, 4),
    ("l3_128x256_1x1s2_4", 128, 256, 1, 2, 4), ("l3_256x256_3x3_2", 256, 256, 3, 1, 2),
    ("l4_256x512_3x3s2_2", 256, 512, 3, 2, 2), ("l4_256x512_1x1s2_2", 256, 512, 1, 2, 2),
    ("l4_512x512_3x3_1", 512, 512, 3, 1, 1),
]

if len(sys.argv) > 2 and sys.argv[2] in ("resnet50", "resnet18"):
    model = sys.argv[2]
    only = sys.argv[3] if len(sys.argv) > 3 else None  # one layer's name (bench/resnet50_convs.sh)
    print("threads", threads, "torch", torch.__version__, "allocator", allocator)
    for name, cin, cout, k, stride, hw in RESNET50_CONVS if model == "resnet50" else RESNET18_CONVS:
        if only is not None and name != only:
            continue
        conv = torch.nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False)
        x = torch.randn(32, cin, hw, hw, requires_grad=True)
        with torch.no_grad():
            y = conv(x)
        dy = torch.randn(y.shape)
        macs = 32 * cout * y.shape[2] * y.shape[3] * cin * k * k

        def forward():
            with torch.no_grad():
                conv(x)

        def training():
            conv.zero_grad()
            x.grad = None
            conv(x).backward(dy)

        for mode, fn, mult in (("forward", forward, 1), ("training", training, 3)):
            dt = timeit(fn)
            print("%s conv %-24s %-8s %8.2f ms %7.1f GFLOP/s" % (model, name, mode, dt * 1e3, 2 * macs * mult / dt / 1e9))
    sys.exit(0)

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
