"""PyTorch definitions of gorun's model zoo and helpers shared by the fixture
generator (gen_fixtures.py) and the round-trip check (roundtrip.py).

Runs with Debian's python3-torch (PyTorch 1.13): /usr/bin/python3.
"""
import json
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class MNISTNet(nn.Module):
    """The PyTorch MNIST example network (seed 004)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


class CIFARNet(nn.Module):
    """Seed 000's CIFARNet: conv → pool → bn → relu blocks, three FC layers."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(64)
        self.conv2 = nn.Conv2d(64, 128, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(128)
        self.conv3 = nn.Conv2d(128, 256, 3, padding=1)
        self.bn3 = nn.BatchNorm2d(256)
        self.conv4 = nn.Conv2d(256, 512, 3, padding=1)
        self.bn4 = nn.BatchNorm2d(512)
        self.pool = nn.MaxPool2d(2, 2)
        self.fc1 = nn.Linear(512 * 8 * 8, 512)
        self.fc2 = nn.Linear(512, 256)
        self.fc3 = nn.Linear(256, 10)
        self.dropout = nn.Dropout(0.5)

    def forward(self, x):
        x = F.relu(self.bn1(self.pool(self.conv1(x))))
        x = F.relu(self.bn2(self.pool(self.conv2(x))))
        x = F.relu(self.bn3(self.conv3(x)))
        x = F.relu(self.bn4(self.conv4(x)))
        x = torch.flatten(x, 1)
        x = self.dropout(F.relu(self.fc1(x)))
        x = self.dropout(F.relu(self.fc2(x)))
        return self.fc3(x)


class StagedCIFARNet(nn.Module):
    """CIFARNet as three nn.Sequential pipeline stages (seed 000)."""

    def __init__(self):
        super().__init__()
        self.stage1 = nn.Sequential(
            nn.Conv2d(3, 64, 3, padding=1), nn.MaxPool2d(2, 2), nn.BatchNorm2d(64), nn.ReLU(),
            nn.Conv2d(64, 128, 3, padding=1), nn.MaxPool2d(2, 2), nn.BatchNorm2d(128), nn.ReLU())
        self.stage2 = nn.Sequential(
            nn.Conv2d(128, 256, 3, padding=1), nn.BatchNorm2d(256), nn.ReLU(),
            nn.Conv2d(256, 512, 3, padding=1), nn.BatchNorm2d(512), nn.ReLU(), nn.Flatten())
        self.stage3 = nn.Sequential(
            nn.Linear(512 * 8 * 8, 512), nn.ReLU(), nn.Dropout(0.5),
            nn.Linear(512, 256), nn.ReLU(), nn.Dropout(0.5), nn.Linear(256, 10))

    def forward(self, x):
        return self.stage3(self.stage2(self.stage1(x)))


class BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock."""

    def __init__(self, inp, out, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inp, out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(out, out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out)
        self.downsample = None
        if stride != 1 or inp != out:
            self.downsample = nn.Sequential(nn.Conv2d(inp, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        idt = x if self.downsample is None else self.downsample(x)
        return self.relu(out + idt)


class Bottleneck(nn.Module):
    """torchvision's ResNet Bottleneck (v1.5: the stride in the 3x3 conv)."""
    expansion = 4

    def __init__(self, inp, width, stride):
        super().__init__()
        out = width * 4
        self.conv1 = nn.Conv2d(inp, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.relu = nn.ReLU()
        self.downsample = None
        if stride != 1 or inp != out:
            self.downsample = nn.Sequential(nn.Conv2d(inp, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        idt = x if self.downsample is None else self.downsample(x)
        return self.relu(out + idt)


class ResNet(nn.Module):
    """torchvision.models.ResNet written out so that torchvision is not
    needed; the state_dict keys are the same (gen_fixtures.py checks them
    against torchvision's where it is installed)."""

    def __init__(self, block, blocks, num_classes):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        inp = 64
        for i, (w, n) in enumerate(zip([64, 128, 256, 512], blocks)):
            s = 1 if i == 0 else 2
            out = w * getattr(block, "expansion", 1)
            layers = [block(inp, w, s)] + [block(out, w, 1) for _ in range(n - 1)]
            setattr(self, "layer%d" % (i + 1), nn.Sequential(*layers))
            inp = out
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(inp, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def ResNet18(num_classes=10):
    """torchvision.models.resnet18(num_classes=10)."""
    return ResNet(BasicBlock, [2, 2, 2, 2], num_classes)


def ResNet50(num_classes=1000):
    """torchvision.models.resnet50()."""
    return ResNet(Bottleneck, [3, 4, 6, 3], num_classes)


MODELS = {"mnist": MNISTNet, "cifarnet": CIFARNet, "cifarnet-staged": StagedCIFARNet, "resnet18": ResNet18, "resnet50": ResNet50}


def formula_weights(model):
    """Sets every parameter from a seeded integer formula both sides compute
    exactly (see model/zoo's fixture test): weight-like tensors (2+ dims)
    uniform-ish in ±1/sqrt(fan_in), biases in ±0.1, batch-norm weights in
    1 ± 0.1. Buffers keep their defaults."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            n = p.numel()
            off = sum(name.encode()) % 97
            i = np.arange(n, dtype=np.int64)
            u = ((i * 7919 + off * 131) % 2003).astype(np.float64) / 2003.0 - 0.5  # [-0.5, 0.5)
            if p.dim() >= 2:
                v = 2 * u / np.sqrt(n // p.shape[0])
            elif name.endswith("weight"):  # batch norm scale
                v = 1 + 0.2 * u
            else:
                v = 0.2 * u
            p.copy_(torch.from_numpy(v.astype(np.float32)).view_as(p))


def save(path, tensors):
    """Writes a dict of name → tensor as safetensors (F32, or I64 for
    integer tensors), without the safetensors package (Debian has none)."""
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        t = torch.as_tensor(t).detach().contiguous()
        if t.dtype in (torch.int64, torch.int32):
            arr, dt = t.to(torch.int64).numpy(), "I64"
        else:
            arr, dt = t.to(torch.float32).numpy(), "F32"
        b = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load(path):
    """Reads a safetensors file into a dict of name → tensor."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        dt = {"F32": np.float32, "I64": np.int64}[h["dtype"]]
        arr = np.frombuffer(data[base + a:base + b], dtype=np.dtype(dt).newbyteorder("<")).reshape(h["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return out
