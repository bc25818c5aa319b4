"""Loads gorun-saved safetensors weights into the PyTorch model (torchvision's
own for the ResNets, where it is installed) with strict names and writes its
evaluation-mode output for a given input (used by model/zoo's round-trip test);
with a fifth argument, also saves the model's state_dict there with
torch.save (the way back: gorun reads it).

    /usr/bin/python3 roundtrip.py MODEL WEIGHTS.safetensors INPUT.safetensors OUT.safetensors [STATE.pth]
"""
import sys

import torch

import torchref

name, weights, inp, out = sys.argv[1:5]
state = torchref.load(weights)
try:  # the ResNets go into torchvision's own
    import torchvision
    model = getattr(torchvision.models, name)(num_classes=state["fc.bias"].numel()) if name.startswith("resnet") else None
except ImportError:
    model = None
if model is None:
    model = torchref.MODELS[name]()
model.load_state_dict(state, strict=True)
model.eval()
with torch.no_grad():
    y = model(torchref.load(inp)["x"])
torchref.save(out, {"y": y})
if len(sys.argv) > 5:
    torch.save(model.state_dict(), sys.argv[5])
