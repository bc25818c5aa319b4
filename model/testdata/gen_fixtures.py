"""Writes the PyTorch parity fixtures that gorun's model tests compare with.

Regenerate (from the repository root, with Debian's python3-torch 1.13):

    /usr/bin/python3 model/testdata/gen_fixtures.py

Outputs, all safetensors, all small (the big models' weights are not stored:
both sides compute them from torchref.formula_weights' integer formula, and
big gradients are stored as sampled entries plus their norm):

    layers.safetensors   per layer: input, parameters, output, upstream
                         gradient r (loss = sum(y * r)), input and parameter
                         gradients, buffers after the forward
    optim.safetensors    three steps of each optimizer configuration and the
                         learning rates of StepLR and CosineAnnealingLR
    mnist.safetensors, cifarnet.safetensors, resnet18.safetensors,
    resnet50.safetensors
                         model output, loss and gradients on a fixed batch
                         in training mode with dropout off, and (mnist:
                         Adadelta, cifarnet: SGD with momentum) the losses and
                         sampled weights after one and two optimizer steps
"""
import os

import numpy as np
import torch
import torch.nn as nn

import torchref

OUT = os.path.dirname(os.path.abspath(__file__))
torch.set_num_threads(1)


def layer_case(out, name, module, x, train=True, setup=None):
    torch.manual_seed(sum(name.encode()))
    module.train(train)
    if setup:
        setup(module)
    x = x.clone().requires_grad_(True)
    for k, v in module.state_dict().items():
        out[name + "/param." + k] = v.clone()
    y = module(x)
    r = torch.randn_like(y)
    (y * r).sum().backward()
    out[name + "/x"] = x.detach()
    out[name + "/y"] = y.detach()
    out[name + "/r"] = r
    out[name + "/dx"] = x.grad
    for k, p in module.named_parameters():
        out[name + "/grad." + k] = p.grad
    for k, b in module.named_buffers():
        out[name + "/buf." + k] = b.clone()


def layers():
    torch.manual_seed(0)
    out = {}
    rn = torch.randn

    def eval_stats(m):
        m.running_mean.copy_(torch.tensor([0.1, -0.2, 0.3]))
        m.running_var.copy_(torch.tensor([0.5, 1.5, 2.0]))

    layer_case(out, "conv_s2p1", nn.Conv2d(3, 4, 3, stride=2, padding=1), rn(2, 3, 7, 7))
    layer_case(out, "conv_1x1", nn.Conv2d(3, 5, 1), rn(2, 3, 4, 4))
    layer_case(out, "conv_nobias_p2", nn.Conv2d(2, 3, 5, padding=2, bias=False), rn(3, 2, 6, 5))
    layer_case(out, "linear", nn.Linear(7, 5), rn(4, 7))
    layer_case(out, "bn_train", nn.BatchNorm2d(3), rn(4, 3, 3, 2) * 2 + 1)
    layer_case(out, "bn_eval", nn.BatchNorm2d(3), rn(2, 3, 2, 2), train=False, setup=eval_stats)
    layer_case(out, "maxpool_k3s2p1", nn.MaxPool2d(3, 2, 1), rn(2, 2, 7, 7))
    layer_case(out, "maxpool_k2", nn.MaxPool2d(2), rn(2, 3, 6, 6))
    layer_case(out, "avgpool_k3s2p1", nn.AvgPool2d(3, 2, 1), rn(2, 2, 6, 6))
    layer_case(out, "adaptive_3x2", nn.AdaptiveAvgPool2d((3, 2)), rn(1, 2, 7, 5))
    layer_case(out, "relu", nn.ReLU(), rn(3, 8))
    layer_case(out, "logsoftmax", nn.LogSoftmax(dim=1), rn(3, 6))
    layer_case(out, "block_train", torchref.BasicBlock(3, 3, 1), rn(2, 3, 4, 4))
    layer_case(out, "block_down_train", torchref.BasicBlock(2, 4, 2), rn(2, 2, 6, 6))
    layer_case(out, "block_down_eval", torchref.BasicBlock(2, 4, 2), rn(2, 2, 6, 6), train=False)

    for name, crit, logits in [("crossentropy", nn.CrossEntropyLoss(), rn(3, 5)),
                               ("nll", nn.NLLLoss(), torch.log_softmax(rn(3, 5), 1)),
                               ("crossentropy_smooth", nn.CrossEntropyLoss(label_smoothing=0.1), rn(3, 5))]:
        x = logits.clone().requires_grad_(True)
        t = torch.tensor([0, 4, 2])
        loss = crit(x, t)
        loss.backward()
        out[name + "/x"] = logits
        out[name + "/target"] = t
        out[name + "/loss"] = loss.detach().reshape(1)
        out[name + "/dx"] = x.grad
    torchref.save(os.path.join(OUT, "layers.safetensors"), out)


def optimizers():
    torch.manual_seed(1)
    out = {}
    p0 = torch.randn(10)
    grads = [torch.randn(10) for _ in range(3)]
    out["p0"] = p0
    for i, g in enumerate(grads):
        out["g%d" % (i + 1)] = g
    cases = {
        "sgd": lambda p: torch.optim.SGD(p, lr=0.1),
        "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
        "sgd_dampening_wd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.3, weight_decay=0.01),
        "sgd_nesterov": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
        "adam": lambda p: torch.optim.Adam(p, lr=0.01),
        "adam_wd": lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.8, 0.99), weight_decay=0.1),
        "adadelta": lambda p: torch.optim.Adadelta(p, lr=1.0),
        "adadelta_wd": lambda p: torch.optim.Adadelta(p, lr=0.5, rho=0.8, weight_decay=0.1),
    }
    for name, make in cases.items():
        p = nn.Parameter(p0.clone())
        opt = make([p])
        for i, g in enumerate(grads):
            p.grad = g.clone()
            opt.step()
            out["%s/p%d" % (name, i + 1)] = p.detach().clone()
    for name, make in [("steplr", lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5)),
                       ("cosine", lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=5, eta_min=0.01)),
                       # torchvision's reference warm-up: LinearLR, then the main schedule
                       ("warmup_cosine", lambda o: torch.optim.lr_scheduler.SequentialLR(o, [
                           torch.optim.lr_scheduler.LinearLR(o, start_factor=0.01, total_iters=3),
                           torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=5, eta_min=0.01)], milestones=[3]))]:
        opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
        sched = make(opt)
        lrs = []
        for _ in range(8):
            lrs.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        out[name + "/lr"] = torch.tensor(lrs, dtype=torch.float64)
    torchref.save(os.path.join(OUT, "optim.safetensors"), out)


def check_torchvision_keys():
    """torchref's ResNets have torchvision's state_dict keys and shapes."""
    try:
        import torchvision
    except ImportError:
        print("torchvision not installed: state_dict keys not checked against it")
        return
    for name, ours in [("resnet18", torchref.ResNet18(10)), ("resnet50", torchref.ResNet50())]:
        theirs = getattr(torchvision.models, name)(num_classes=10 if name == "resnet18" else 1000).state_dict()
        mine = ours.state_dict()
        assert list(mine) == list(theirs), name + ": state_dict keys differ from torchvision's"
        assert all(mine[k].shape == theirs[k].shape for k in mine), name + ": shapes differ from torchvision's"
        print(name, "state_dict matches torchvision", torchvision.__version__)


def sample_index(n):
    return np.unique(np.linspace(0, n - 1, min(n, 1000)).astype(np.int64))


def store_params(out, prefix, model, full_limit=20000):
    for k, p in model.named_parameters():
        v = p.detach().reshape(-1) if prefix.startswith("p") else p.grad.reshape(-1)
        out[prefix + "norm/" + k] = v.double().norm().reshape(1)
        if v.numel() <= full_limit:
            out[prefix + "/" + k] = v.clone()
        else:
            idx = sample_index(v.numel())
            out[prefix + "idx/" + k] = torch.from_numpy(idx)
            out[prefix + "/" + k] = v[torch.from_numpy(idx)].clone()


def model_case(name, batch, shape, make_opt, steps=2, train=True):
    torch.manual_seed(2)
    model = torchref.MODELS[name]()
    torchref.formula_weights(model)
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    model.train(train)
    x = torch.randn(batch, *shape)
    target = torch.randint(0, 10, (batch,))
    crit = nn.NLLLoss() if name == "mnist" else nn.CrossEntropyLoss()
    out = {"x": x, "target": target}
    opt = make_opt(model.parameters()) if make_opt else None
    for step in range(steps + 1):
        model.zero_grad()
        y = model(x)
        loss = crit(y, target)
        out["loss%d" % step] = loss.detach().reshape(1)
        if step == 0:
            out["y0"] = y.detach()
            loss.backward()
            store_params(out, "grad", model)
            for k, b in model.named_buffers():
                if b.dtype == torch.float32:
                    out["buf/" + k] = b.clone()
        elif opt is None:
            break
        else:
            loss.backward()
        if opt is None or step == steps:
            break
        opt.step()
        store_params(out, "p%d" % (step + 1), model)
    torchref.save(os.path.join(OUT, name + ".safetensors"), out)


if __name__ == "__main__":
    layers()
    optimizers()
    model_case("mnist", 8, (1, 28, 28), lambda p: torch.optim.Adadelta(p, lr=1.0))
    model_case("cifarnet", 4, (3, 32, 32), lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9))
    # 64×64 inputs keep 2×2 maps in layer4: batch norm over a 1×1 map of a
    # tiny batch is too ill-conditioned to compare in float32.
    model_case("resnet18", 4, (3, 64, 64), None, steps=0)
    # ResNet-50 in evaluation mode: in training mode, batch norm over its
    # deep, small maps makes float32 itself unreliable under the formula
    # weights (PyTorch's own float32 gradients differ from float64 by up to
    # 76%, its output by 0.9%; in evaluation mode by 1.5e-6 and 2e-7).
    # Training-mode batch norm is compared per layer and in ResNet-18.
    model_case("resnet50", 4, (3, 64, 64), None, steps=0, train=False)
    check_torchvision_keys()
    for f in sorted(os.listdir(OUT)):
        if f.endswith(".safetensors"):
            print(f, os.path.getsize(os.path.join(OUT, f)))
