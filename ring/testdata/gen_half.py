"""Fixtures for ring's 16-bit float conversions: torch's own rounding of
float32 values to bfloat16 and float16 (round to nearest even, overflow
to infinity, subnormals, NaN), and its widening of 16-bit patterns back
to float32. Run with Debian's Python (python3-torch):

    /usr/bin/python3 ring/testdata/gen_half.py > ring/testdata/half.json
"""
import json
import random

import numpy as np
import torch

random.seed(7)
f32 = []
# Special values and boundaries.
for v in [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.0, 65504.0, 65505.0, 65519.0, 65520.0, 65536.0, 1e5, -1e5,
          6.1035156e-05, 6.0e-05, 5.96e-08, 2.98e-08, 2.9802322e-08, 1e-10, 3.3895314e38, 3.4e38,
          float("inf"), float("-inf"), float("nan")]:
    f32.append(int(np.array([v], dtype=np.float32).view(np.uint32)[0]))
# Ties and near-ties for both formats: the bits just around each rounding
# boundary, for many exponents.
for _ in range(100):
    e = random.randint(90, 160)
    m = random.getrandbits(23)
    for low in (0x8000, 0x7FFF, 0x8001, 0x18000, 0x1000, 0x0FFF, 0x1001, 0x3000):
        f32.append(((e << 23) | (m & ~0x1FFFF) | low) & 0xFFFFFFFF)
        f32.append(f32[-1] | 0x80000000)
# Random patterns, NaN payloads included.
for _ in range(500):
    f32.append(random.getrandbits(32))
x = torch.from_numpy(np.array(f32, dtype=np.uint32).view(np.float32))
bf = x.to(torch.bfloat16).view(torch.int16).numpy().astype(np.uint16)
hf = x.to(torch.float16).view(torch.int16).numpy().astype(np.uint16)
# Widening: sample 16-bit patterns, every exponent.
pats = sorted(set([random.getrandbits(16) for _ in range(1000)] + [0, 0x8000, 0x0001, 0x03FF, 0x0400, 0x7BFF, 0x7C00, 0x7C01, 0x7E00, 0xFC00, 0x7F80, 0x7FC0, 0xFF80]))
p = torch.from_numpy(np.array(pats, dtype=np.uint16).view(np.int16))
bf_wide = p.view(torch.bfloat16).float().view(torch.int32).numpy().astype(np.uint32)
hf_wide = p.view(torch.float16).float().view(torch.int32).numpy().astype(np.uint32)
print(json.dumps({
    "torch": torch.__version__,
    "f32": f32, "bf16": bf.tolist(), "fp16": hf.tolist(),
    "patterns": pats, "bf16_f32": bf_wide.tolist(), "fp16_f32": hf_wide.tolist(),
}))
