"""Writes the fixtures of model/torchfile's tests with Debian's PyTorch:

  state.pth       a state dict: float32, float64, float16, bfloat16, int64
                  (a 0-d num_batches_tracked), int32, uint8 and bool
                  tensors; a transposed view and a view at an offset into
                  another entry's storage
  checkpoint.pth  {"epoch": 3, "model_state_dict": ..., "optimizer_state_dict": ...}
                  (the optimizer's state holding a tensor of its own)
  list.pth        a list, not a state dict
  legacy.pth      a state dict in torch.save's format before PyTorch 1.6

Element i of every tensor made here is (i % 13) - 6 (+ 0.5 for floating
types): exact in each type; the Go test computes the same.

    /usr/bin/python3 model/torchfile/testdata/gen_torchfiles.py
"""
import collections
import os

import torch

OUT = os.path.dirname(os.path.abspath(__file__))


def values(shape, dtype):
    n = 1
    for d in shape:
        n *= d
    v = torch.tensor([(i % 13) - 6 for i in range(n)], dtype=torch.float64)
    if dtype.is_floating_point:
        v = v + 0.5
    if dtype == torch.bool:
        return (v > 0).reshape(shape)
    if dtype == torch.uint8:
        v = v + 6
    return v.to(dtype).reshape(shape)


def main():
    base = values((4, 3), torch.float32)
    sd = collections.OrderedDict()
    sd["conv.weight"] = values((2, 1, 3, 3), torch.float32)
    sd["bn.running_var"] = values((2,), torch.float64)
    sd["bn.num_batches_tracked"] = torch.tensor(7, dtype=torch.int64)
    sd["half"] = values((5,), torch.float16)
    sd["bf16"] = values((2, 2), torch.bfloat16)
    sd["i32"] = values((3,), torch.int32)
    sd["u8"] = values((3,), torch.uint8)
    sd["mask"] = values((4,), torch.bool)
    sd["base"] = base
    sd["transposed"] = base.t()  # stride (1, 3), the same storage
    sd["rows"] = base[1:]  # offset 3 into it
    assert not sd["transposed"].is_contiguous()
    torch.save(sd, os.path.join(OUT, "state.pth"))
    torch.save({"epoch": 3, "model_state_dict": collections.OrderedDict(list(sd.items())[:2]),
                "optimizer_state_dict": {"state": {0: {"momentum_buffer": values((2, 1, 3, 3), torch.float32)}},
                                         "param_groups": [{"lr": 0.1}]}},
               os.path.join(OUT, "checkpoint.pth"))
    torch.save([1, 2, 3], os.path.join(OUT, "list.pth"))
    torch.save(collections.OrderedDict(list(sd.items())[:1]), os.path.join(OUT, "legacy.pth"),
               _use_new_zipfile_serialization=False)
    for name in ("state.pth", "checkpoint.pth", "list.pth", "legacy.pth"):
        print(name, os.path.getsize(os.path.join(OUT, name)), "bytes")


if __name__ == "__main__":
    main()
