"""A model from torchvision's zoo, cut into chunks as a user would cut it: ResNet-18 (batch
norm in every block) over 4 stages. Gradients and the batch norm statistics come out bitwise
those of a plain loop under fixed 1F1B, ready BF, BFW (split backward) and the adaptive rule,
with variable microbatch sizes and delays; ordered forwards turn on by themselves."""
import pytest
import torch
from torch import nn
import torch.nn.functional as F
import torchvision

import rrfp


def chunks():
    torch.manual_seed(0)
    r = torchvision.models.resnet18(num_classes=10)
    return [nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool, r.layer1), r.layer2, r.layer3,
            nn.Sequential(r.layer4, r.avgpool, nn.Flatten(), r.fc)]


def loss_fn(y, t):
    return F.cross_entropy(y, t)


def data():
    g = torch.Generator().manual_seed(1)
    sizes = [2, 4, 2, 3]  # images per microbatch: the adaptive rule reorders them
    return ([torch.randn(n, 3, 32, 32, generator=g) for n in sizes],
            [torch.randint(0, 10, (n,), generator=g) for n in sizes])


@pytest.mark.parametrize("kw", [dict(hint="1f1b", policy="fixed"), dict(hint="bf"),
                                dict(hint="bfw"), dict(hint="adaptive")],
                         ids=lambda k: k["hint"])
def test_resnet18_is_a_plain_loops(kw):
    xs, ys = data()
    ref = chunks()
    for x, y in zip(xs, ys):
        h = x
        for c in ref:
            h = c(h)
        loss_fn(h, y).backward()
    model = chunks()
    pipe = rrfp.Pipeline(model, loss_fn, pp=4, microbatches=4, timeout=120,
                         delay_fn=lambda s, k, c, mb: 0.001 * ((s + mb) % 2), **kw)
    assert pipe.ordered_forwards
    pipe.step(xs, ys)
    for a, b in zip(model, ref):
        for (name, p), q in zip(a.named_parameters(), b.parameters()):
            assert torch.equal(p.grad, q.grad), name
        for (name, p), q in zip(a.named_buffers(), b.buffers()):
            assert torch.equal(p, q), name
