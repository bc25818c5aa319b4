"""PyTorch (with cuDNN) training on one GPU, the work bench/gpu.sh gives
gorun's train --device cuda: MODEL on N images, batch B, SGD momentum 0.9,
FP32 (TF32 off in matmul and cuDNN; a fourth argument "tf32" turns it on
in both, "default" keeps PyTorch's defaults: on in cuDNN, off in matmul),
data already on the GPU, one epoch
after a warm-up of 20 batches. Prints images per second and the peak GPU
memory PyTorch's allocator held (torch.cuda.max_memory_reserved).

Modes: fp32, tf32, default, and for the mixed-precision runs PyTorch users
take for ResNet-50 "amp" (torch.autocast bf16 with channels-last tensors)
and "amp-fp16" (float16 autocast, channels-last, GradScaler).

    python3 bench/competitors/torch_gpu_train.py cifarnet 25600 128
    python3 bench/competitors/torch_gpu_train.py mnist 60000 64
    python3 bench/competitors/torch_gpu_train.py resnet50 2560 256 amp

CIFARNet trains on random CIFAR-shaped data (the work, not the accuracy, is
compared); mnist on random MNIST-shaped data too; resnet50 (torchvision's,
1000 classes) on random 224x224 images.
"""
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "model", "testdata"))
from torchref import CIFARNet, MNISTNet  # noqa: E402

model_name, n, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
mode = sys.argv[4] if len(sys.argv) > 4 else "fp32"
if mode in ("fp32", "tf32"):  # PyTorch's defaults: TF32 in cuDNN convolutions, not in matmul
    torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
    torch.backends.cudnn.allow_tf32 = mode == "tf32"
torch.backends.cudnn.benchmark = True
dev = torch.device("cuda")
torch.manual_seed(1)
if model_name == "mnist":
    x, y = torch.randn(n, 1, 28, 28, device=dev), torch.randint(0, 10, (n,), device=dev)
    net, loss_fn = MNISTNet().to(dev), F.nll_loss
elif model_name == "resnet50":
    import torchvision
    # Images are made batch by batch (a whole ImageNet-sized epoch would not
    # fit); the same few batches cycle.
    x, y = torch.randn(4 * batch, 3, 224, 224, device=dev), torch.randint(0, 1000, (4 * batch,), device=dev)
    net, loss_fn = torchvision.models.resnet50().to(dev), F.cross_entropy
else:
    x, y = torch.randn(n, 3, 32, 32, device=dev), torch.randint(0, 10, (n,), device=dev)
    net, loss_fn = CIFARNet().to(dev), F.cross_entropy
amp = mode.startswith("amp")
half = torch.float16 if mode == "amp-fp16" else torch.bfloat16
if amp:
    net = net.to(memory_format=torch.channels_last)
    x = x.contiguous(memory_format=torch.channels_last)
# torch.amp.GradScaler("cuda") from PyTorch 2.3; torch.cuda.amp's before.
scaler = (torch.amp.GradScaler("cuda", enabled=mode == "amp-fp16") if hasattr(torch.amp, "GradScaler")
          else torch.cuda.amp.GradScaler(enabled=mode == "amp-fp16"))
opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)


def epoch(limit):
    for i in range(0, min(n, limit * batch), batch):
        j = i % x.shape[0]
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cuda", dtype=half, enabled=amp):
            loss = loss_fn(net(x[j:j + batch]), y[j:j + batch])
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        loss.item()  # one host sync per step, as gorun's loss value


net.train()
epoch(20)
torch.cuda.synchronize()
t0 = time.perf_counter()
epoch(n // batch + 1)
torch.cuda.synchronize()
secs = time.perf_counter() - t0
print("torch-cuda %s%s %s: %d images in %.2f s, %.0f img/s, peak GPU memory %.0f MiB (torch %s, cuDNN %s)" % (
    model_name, " " + mode, torch.cuda.get_device_name(), n, secs, n / secs, torch.cuda.max_memory_reserved() / 2**20,
    torch.__version__, torch.backends.cudnn.version()))
