"""Loads gorun-saved safetensors weights into the PyTorch model and writes its
evaluation-mode output for a given input (used by model/zoo's round-trip test).

    /usr/bin/python3 roundtrip.py MODEL WEIGHTS.safetensors INPUT.safetensors OUT.safetensors
"""
import sys

import torch

import torchref

name, weights, inp, out = sys.argv[1:5]
model = torchref.MODELS[name]()
model.load_state_dict(torchref.load(weights), strict=True)
model.eval()
with torch.no_grad():
    y = model(torchref.load(inp)["x"])
torchref.save(out, {"y": y})
