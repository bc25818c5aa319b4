"""Writes the fixtures of train/data's image-folder tests: a few small
images (PNG and JPEG: RGB, grayscale, CMYK, progressive, RGBA with
transparency, palette; up- and down-scaled sizes) in images/, and what torchvision 0.14 with PIL makes of
each (loaded as ImageFolder does: PIL, convert("RGB"); then Resize(40),
CenterCrop(32)) in eval.safetensors, as float32 0-255 HWC arrays.

    /usr/bin/python3 train/data/testdata/gen_imagefolder.py
"""
import os
import sys

import numpy as np
import torch
from PIL import Image
from torchvision import transforms

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "model", "testdata"))
import torchref  # noqa: E402

OUT = os.path.dirname(os.path.abspath(__file__))


def pattern(w, h, seed):
    """A smooth, colourful pattern with some edges (deterministic)."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    r = 127 + 120 * np.sin(x / (3 + seed) + y / 7)
    g = 127 + 120 * np.cos(y / (4 + seed) - x / 11)
    b = np.where((x // 8 + y // 8) % 2 == 0, 30 + 10 * seed, 220 - 10 * seed)
    return np.stack([r, g, b], axis=-1).clip(0, 255).astype(np.uint8)


def with_alpha(im):
    """im with a partly transparent alpha gradient (RGBA)."""
    a = np.linspace(0, 255, im.width * im.height).reshape(im.height, im.width).astype(np.uint8)
    rgba = im.convert("RGBA")
    rgba.putalpha(Image.fromarray(a))
    return rgba


def main():
    d = os.path.join(OUT, "images")
    os.makedirs(d, exist_ok=True)
    cases = [
        ("rgb-down.png", 97, 71, lambda im, p: im.save(p)),
        ("rgb-up.png", 23, 30, lambda im, p: im.save(p)),
        ("gray.png", 61, 88, lambda im, p: im.convert("L").save(p)),
        ("rgb.jpg", 97, 71, lambda im, p: im.save(p, quality=90)),
        ("progressive.jpg", 80, 64, lambda im, p: im.save(p, quality=85, progressive=True)),
        ("gray.jpg", 64, 80, lambda im, p: im.convert("L").save(p, quality=90)),
        ("cmyk.jpg", 72, 72, lambda im, p: im.convert("CMYK").save(p, quality=95)),
        ("alpha.png", 50, 41, lambda im, p: with_alpha(im).save(p)),
        ("palette.png", 44, 52, lambda im, p: im.quantize(16).save(p)),
    ]
    tf = transforms.Compose([transforms.Resize(40), transforms.CenterCrop(32)])
    out = {}
    for i, (name, w, h, save) in enumerate(cases):
        p = os.path.join(d, name)
        save(Image.fromarray(pattern(w, h, i)), p)
        with open(p, "rb") as f:
            img = Image.open(f).convert("RGB")  # as torchvision's pil_loader
        out[name] = torch.from_numpy(np.asarray(tf(img)).astype(np.float32))
        out["decoded/" + name] = torch.from_numpy(np.asarray(img).astype(np.float32))
    torchref.save(os.path.join(OUT, "eval.safetensors"), out)
    for f in sorted(os.listdir(d)):
        print(f, os.path.getsize(os.path.join(d, f)))
    print("eval.safetensors", os.path.getsize(os.path.join(OUT, "eval.safetensors")))


main()
