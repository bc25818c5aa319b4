"""Loads a gorun MNIST-net checkpoint into PyTorch's MNISTNet with
load_state_dict(strict=True) and prints its Fashion-MNIST test accuracy:
the weights gorun saves are PyTorch's.

    /usr/bin/python3 bench/competitors/torch_eval.py fmnist.safetensors
"""
import os
import sys

from common import allocator  # first, before torch: it picks PyTorch's memory allocator

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "model", "testdata"))
import torchref  # noqa: E402
from common import idx  # noqa: E402

d = "/usr/share/datasets/fashion-mnist"
x = (torch.from_numpy(idx(d + "/t10k-images-idx3-ubyte.gz").astype(np.float32) / 255)[:, None] - 0.1307) / 0.3081
y = torch.from_numpy(idx(d + "/t10k-labels-idx1-ubyte.gz").astype(np.int64))
model = torchref.MNISTNet()
model.load_state_dict(torchref.load(sys.argv[1]), strict=True)
model.eval()
with torch.no_grad():
    correct = (model(x).argmax(1) == y).sum().item()
print("PyTorch on %s: %d/%d (%.2f%%)" % (sys.argv[1], correct, len(y), 100 * correct / len(y)))
