"""How far torch.autocast(bf16) moves the MNIST net's gradients from
float32's on the CPU: the relative norm of the difference per parameter.
model/amp's TestGradientsNearFloat32 holds gorun's emulation to the same
scale. Run with Debian's python3 (PyTorch 1.13) from the repository root:

    /usr/bin/python3 model/testdata/autocast_grads.py

Output on 2026-11-26 (PyTorch 1.13.1): loss 2.3007 in float32, 2.3027
in bf16; conv1.weight 0.081, conv1.bias 0.100, conv2.weight 0.076,
conv2.bias 0.070, fc1.weight 0.052, fc1.bias 0.061, fc2.weight 0.0074,
fc2.bias 0.0053.
"""
import sys, torch, torch.nn.functional as F
sys.path.insert(0, "model/testdata")
from torchref import MNISTNet
torch.manual_seed(7)
net = MNISTNet().eval()
x = torch.randn(16, 1, 28, 28); y = torch.arange(16) % 10
def grads(auto):
    net.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=auto):
        out = net(x)
    loss = F.nll_loss(out.float(), y)
    loss.backward()
    return loss.item(), [p.grad.clone() for p in net.parameters()]
l32, g32 = grads(False)
l16, g16 = grads(True)
print(l32, l16)
for (n, _), a, b in zip(net.named_parameters(), g16, g32):
    print(n, ((a - b).norm() / b.norm()).item())
