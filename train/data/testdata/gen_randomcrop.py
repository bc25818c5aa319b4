"""Writes the fixtures of train/data's random-resized-crop tests.

randomcrop.json: the distribution of the crops torchvision 0.14's
RandomResizedCrop.get_params (scale 0.08–1, ratio 3/4–4/3) draws, for
several image sizes (one so elongated that most of its draws fall back
to the central crop): the mean and standard deviation of the crop's
area fraction, log aspect ratio and relative position, a histogram of
the area fraction, and how often the fallback crop came out.

randomcrop.safetensors: F.resized_crop on a PIL image for a few fixed
crops (bilinear, to 24×24), with and without a horizontal flip, as
float32 0-255 HWC arrays, from images/rgb-down.png (a PNG: Go decodes
it to the same bytes as PIL).

    /usr/bin/python3 train/data/testdata/gen_randomcrop.py
"""
import json
import math
import os
import sys

import numpy as np
import torch
from PIL import Image
from torchvision import transforms
from torchvision.transforms import functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "model", "testdata"))
import torchref  # noqa: E402

OUT = os.path.dirname(os.path.abspath(__file__))
DRAWS = 20000
BINS = 10


def fallback(width, height, ratio=(3 / 4, 4 / 3)):
    """The crop get_params returns when its ten tries fail."""
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        w, h = int(round(height * max(ratio))), height
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def stats(width, height):
    torch.manual_seed(width * 1000 + height)
    img = Image.new("RGB", (width, height))
    rrc = transforms.RandomResizedCrop(8)
    area, logratio, top, left, falls = [], [], [], [], 0
    fb = fallback(width, height)
    for _ in range(DRAWS):
        i, j, h, w = rrc.get_params(img, rrc.scale, rrc.ratio)
        area.append(h * w / (width * height))
        logratio.append(math.log(w / h))
        top.append(i / height)
        left.append(j / width)
        falls += (i, j, h, w) == fb
    hist = np.zeros(BINS)
    for a in area:  # (as the Go test bins them, to the last rounding)
        hist[min(int(a * BINS), BINS - 1)] += 1
    hist /= DRAWS
    out = {"width": width, "height": height, "draws": DRAWS, "fallback": falls / DRAWS, "area_hist": hist.tolist()}
    for name, v in [("area", area), ("logratio", logratio), ("top", top), ("left", left)]:
        out[name] = {"mean": float(np.mean(v)), "std": float(np.std(v))}
    return out


def main():
    cases = [stats(w, h) for w, h in [(500, 375), (64, 64), (1000, 100), (90, 400)]]
    with open(os.path.join(OUT, "randomcrop.json"), "w") as f:
        json.dump(cases, f, indent=1)
    with open(os.path.join(OUT, "images", "rgb-down.png"), "rb") as f:
        img = Image.open(f).convert("RGB")
    out = {}
    for n, (i, j, h, w) in enumerate([(0, 0, 71, 97), (10, 20, 40, 30), (5, 60, 12, 37), (30, 1, 41, 41)]):
        crop = F.resized_crop(img, i, j, h, w, [24, 24], transforms.InterpolationMode.BILINEAR)
        out[f"crop{n}"] = torch.from_numpy(np.asarray(crop).astype(np.float32))
        out[f"crop{n}/flip"] = torch.from_numpy(np.asarray(F.hflip(crop)).astype(np.float32))
        out[f"crop{n}/box"] = torch.tensor([i, j, h, w], dtype=torch.float32)
    torchref.save(os.path.join(OUT, "randomcrop.safetensors"), out)
    print("randomcrop.json", os.path.getsize(os.path.join(OUT, "randomcrop.json")))
    print("randomcrop.safetensors", os.path.getsize(os.path.join(OUT, "randomcrop.safetensors")))


main()
