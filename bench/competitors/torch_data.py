"""The torchvision side of `bench data`: images per second through
torchvision's ImageFolder and DataLoader with PIL on an image folder's
training images, torchvision's ImageNet training transforms
(RandomResizedCrop, RandomHorizontalFlip, ToTensor, Normalize), or with
--eval its evaluation transforms (Resize(size·8/7), CenterCrop(size)).
A batch and then IMAGES images are drawn in a random order, the images
timed from the first batch's arrival to the last's, as `bench data`
times them. Prints one JSON object, as `bench data -json` does.

    /usr/bin/python3 bench/competitors/torch_data.py DIR WORKERS [IMAGES [BATCH [SIZE]]] [--eval]
"""
import json
import os
import sys
import time

from common import allocator  # first, before torch: it picks PyTorch's memory allocator

import PIL
import torch
import torchvision
from torch.utils.data import DataLoader, RandomSampler
from torchvision import datasets, transforms

args = [a for a in sys.argv[1:] if not a.startswith("--")]
evaluate = "--eval" in sys.argv
root, workers = args[0], int(args[1])
images = int(args[2]) if len(args) > 2 else 2048
batch = int(args[3]) if len(args) > 3 else 32
size = int(args[4]) if len(args) > 4 else 224
torch.set_num_threads(1)

normalize = transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
if evaluate:
    tf = transforms.Compose([transforms.Resize(size * 8 // 7), transforms.CenterCrop(size), transforms.ToTensor(), normalize])
    what = "Resize+CenterCrop+normalise"
else:
    tf = transforms.Compose([transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip(), transforms.ToTensor(), normalize])
    what = "RandomResizedCrop+flip+normalise"
ds = datasets.ImageFolder(os.path.join(root, "train"), tf)
g = torch.Generator().manual_seed(1)
loader = DataLoader(ds, batch_size=batch, num_workers=workers,
                    sampler=RandomSampler(ds, replacement=True, num_samples=images + batch, generator=g))
start, n = None, 0
for x, y in loader:
    if start is None:
        start = time.perf_counter()
        continue
    n += len(y)
sec = time.perf_counter() - start
print(json.dumps({"allocator": allocator, "images_per_sec": n / sec, "workers": workers, "images": n, "batch": batch, "seconds": sec,
                  "transform": f"{what} to {size}×{size}",
                  "decoder": f"PIL {PIL.__version__} (libjpeg-turbo), torchvision {torchvision.__version__}, DataLoader num_workers={workers}"}))
