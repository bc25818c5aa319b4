"""Writes an image folder of photo-like JPEGs for the data-pipeline
benchmark (bench/data.sh): ImageNet cannot be downloaded here, and
gendata's images (smooth patterns scaled up) compress and decode far
more easily than photographs. These have ImageNet's typical sizes
(500×375, 375×500, 500×333, 333×500), texture at every scale (summed
waves and grain) and, at quality 90, about ImageNet's file sizes
(100–150 KB).

    /usr/bin/python3 bench/gen_photos.py DIR [TRAIN [VAL [CLASSES]]]
"""
import os
import sys

import numpy as np
from PIL import Image

SIZES = [(500, 375), (375, 500), (500, 333), (333, 500)]


def photo(rng, w, h):
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.zeros((h, w, 3), np.float32)
    for _ in range(12):  # waves from broad to fine
        f = rng.uniform(0.005, 0.25)
        a = rng.uniform(0, 2 * np.pi)
        phase = rng.uniform(0, 2 * np.pi)
        wave = np.sin(f * (x * np.cos(a) + y * np.sin(a)) + phase)
        img += wave[..., None] * rng.uniform(5, 30, size=3)
    img += rng.normal(0, 20, size=img.shape)  # grain
    img += rng.uniform(60, 190, size=3)
    return Image.fromarray(img.clip(0, 255).astype(np.uint8))


def main():
    out = sys.argv[1]
    n_train = int(sys.argv[2]) if len(sys.argv) > 2 else 512
    n_val = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    classes = int(sys.argv[4]) if len(sys.argv) > 4 else 8
    rng = np.random.default_rng(1)
    total = 0
    for split, n in (("train", n_train), ("val", n_val)):
        for i in range(n):
            c = f"class{i % classes:03d}"
            os.makedirs(os.path.join(out, split, c), exist_ok=True)
            w, h = SIZES[i % len(SIZES)]
            p = os.path.join(out, split, c, f"{i:06d}.jpg")
            photo(rng, w, h).save(p, quality=90)
            total += os.path.getsize(p)
    print(f"{n_train + n_val} images, {total / (n_train + n_val) / 1024:.0f} KiB each on average, in {out}")


main()
