"""rrfp.GradScaler with a process per stage, run by multiprocess_pipeline.py under mpirun and
torchrun: on one step only the first chunk's gradients overflow (a module at its end
multiplies the gradient that flows back through it by 1e38). Every process must skip that
step and back off its scale, the stages whose own gradients were finite too: with torch's
GradScaler they would step, keep their scale, and from then on the last stage would scale the
loss by another factor than the first stage unscales by.

The reference is a plain loop over the same model with the same scaler rules (each replica's
gradient, then the replicas' sum in replica order); every parameter, the scale and the loss
come out bitwise equal."""
import torch
from torch import nn

import rrfp
import test_grad_scaler

STEPS, BAD_STEP = 5, 1
SETTINGS = dict(growth_interval=2)


class Amplify(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g * 1e38


class MaybeAmplify(nn.Module):
    """Passes its input on; on the bad step, the gradient back through it overflows."""
    step = [0]

    def forward(self, x):
        return Amplify.apply(x) if MaybeAmplify.step[0] == BAD_STEP else x


def chunks(pp):
    torch.manual_seed(3)
    cs = [nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(pp)]
    cs[0].append(MaybeAmplify())
    return cs


def batch(step, replica, m):
    g = torch.Generator().manual_seed(step * 100 + replica)
    return torch.randn(2 * m, 8, generator=g), torch.randn(2 * m, 8, generator=g)


def params(cs):
    return list(nn.Sequential(*cs).parameters())


def reference(pp, dp, m):
    model = chunks(pp)
    opt = torch.optim.SGD(params(model), lr=0.01, momentum=0.9)
    scaler = rrfp.GradScaler(**SETTINGS)
    scales, losses = [], []
    for s in range(STEPS):
        MaybeAmplify.step[0] = s
        total, loss_sum = None, []
        for r in range(dp):
            opt.zero_grad(set_to_none=True)
            loss_sum.append(test_grad_scaler.scaled_backward(model, *batch(s, r, m), m, scaler))
            grads = [p.grad for p in params(model)]
            total = grads if total is None else [a + b for a, b in zip(total, grads)]
        for p, g in zip(params(model), total):
            p.grad = g
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
        losses.append(loss_sum)
    return model, scales, losses


def train(pp, dp, m, transport, per_parameter):
    """The pipeline against the plain loop; `per_parameter`: the first stage's processes hold
    an optimizer per parameter, the others one: processes with different numbers of
    optimizers, where a gather at every unscale_ met another process's next collective."""
    ref, ref_scales, ref_losses = reference(pp, dp, m)
    model = chunks(pp)
    pipe = rrfp.Pipeline(model, test_grad_scaler.loss_fn, pp=pp, microbatches=m,
                         transport=transport, dp=dp, timeout=60, hint="bf")
    mine = [p for c in sorted(pipe.chunks) for p in model[c].parameters()]
    groups = [[p] for p in mine] if per_parameter and 0 in pipe.chunks else [mine]
    opts = [torch.optim.SGD(g, lr=0.01, momentum=0.9) for g in groups]
    scaler = rrfp.GradScaler(pipe, **SETTINGS)
    for s in range(STEPS):
        MaybeAmplify.step[0] = s
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        loss = pipe.step(*batch(s, pipe.replica, m))
        assert torch.equal(loss, ref_losses[s][pipe.replica]), f"rank {pipe.rank}: step {s} loss"
        for opt in opts:
            scaler.step(opt)
        scaler.update()
        assert scaler.get_scale() == ref_scales[s], \
            f"rank {pipe.rank}: step {s}: scale {scaler.get_scale()}, want {ref_scales[s]}"
    for c in pipe.chunks:
        for p, q in zip(ref[c].parameters(), model[c].parameters()):
            assert torch.equal(p, q), f"rank {pipe.rank}: chunk {c} differs from the plain loop"
    assert ref_scales[BAD_STEP] < ref_scales[BAD_STEP - 1]  # the bad step backed off
    print(f"rank {pipe.rank}: loss scaling skips the step every stage's gradients overflowed "
          f"in or not (pp={pp} x dp={dp}, {len(opts)} optimizer(s) here), bitwise", flush=True)
    return pipe, model, opts[0], scaler


def run(pp, dp, m, transport):
    train(pp, dp, m, transport, per_parameter=True)
    pipe, model, opt, scaler = train(pp, dp, m, transport, per_parameter=False)

    # A process that cannot unscale (a float16 gradient, on the first process alone) is told to
    # every other, which raises too, where it used to wait in the gather until its timeout.
    MaybeAmplify.step[0] = STEPS
    opt.zero_grad(set_to_none=True)
    pipe.step(*batch(STEPS, pipe.replica, m))
    raw = [p.grad.clone() for g in opt.param_groups for p in g["params"] if p.grad is not None]
    if pipe.rank == 0:
        half = nn.Parameter(torch.ones(2, dtype=torch.float16))
        half.grad = torch.ones(2, dtype=torch.float16)
        opt.add_param_group({"params": [half]})
    try:
        scaler.unscale_(opt)
    except (ValueError, RuntimeError) as e:
        assert ("float16" if pipe.rank == 0 else "process(es) [0]") in str(e), e
    else:
        raise AssertionError(f"rank {pipe.rank}: unscale_ went on after rank 0 failed")
    print(f"rank {pipe.rank}: an unscale_ that fails on one process raises on every one",
          flush=True)
    # Retried on the same gradients, the float16 parameter gone: those the refused call divided
    # (every process's but rank 0's) are not divided again.
    if pipe.rank == 0:
        opt.param_groups.pop()
    scaler.unscale_(opt)
    inv = torch.tensor(scaler.get_scale(), dtype=torch.float64).reciprocal().float()
    now = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
    assert all(torch.equal(g, r.mul(inv)) for g, r in zip(now, raw)) and len(now) == len(raw), \
        f"rank {pipe.rank}: a retried unscale_ divided the gradients again"
    scaler.step(opt)
    scaler.update()

    # A process that calls update() where the others unscale (through step()) is told so on
    # every process, in the one gather: its update() used to pair with their unscale_.
    opt.zero_grad(set_to_none=True)
    pipe.step(*batch(STEPS, pipe.replica, m))
    try:
        scaler.update() if pipe.rank == 0 else scaler.step(opt)
    except RuntimeError as e:
        assert "not making the same call (job rank 0 in GradScaler.update() after" in str(e), e
    else:
        raise AssertionError(f"rank {pipe.rank}: went on beside another process's update()")
    print(f"rank {pipe.rank}: update() beside another process's unscale_ raises on every one",
          flush=True)

    # Scales that differ between the processes: the last stage scaled the loss by its own and
    # every stage unscaled by its own, stage 0's gradients off by their ratio, silently. A
    # new_scale given differently, then a state loaded on one process alone, are refused on
    # every process.
    try:
        scaler.update(new_scale=1024.0 * (1 + pipe.rank))
    except ValueError as e:
        assert "update: the processes pass different new_scale (job rank 0: 1024" in str(e), e
    else:
        raise AssertionError(f"rank {pipe.rank}: new_scale differing between processes taken")
    apart = dict(scaler.state_dict(), scale=8.0 if pipe.rank == 0 else 16.0)
    scaler.load_state_dict(apart)
    opt.zero_grad(set_to_none=True)
    try:  # refused before the step runs: its last stage would scale by its own
        pipe.step(*batch(STEPS, pipe.replica, m))
    except ValueError as e:
        assert "step: the processes scale the loss differently (job rank 0: 8.0, job rank 1: " \
            "16.0" in str(e), e
    else:
        raise AssertionError(f"rank {pipe.rank}: a step ran with scales differing")
    scaler.load_state_dict(dict(apart, scale=8.0))
    pipe.step(*batch(STEPS, pipe.replica, m))
    scaler.load_state_dict(apart)  # apart after the step: refused where the gradients unscale
    try:
        scaler.unscale_(opt)
    except ValueError as e:
        assert "GradScaler.unscale_(): the processes' GradScalers hold different scales (job " \
            "rank 0: 8.0, job rank 1: 16.0" in str(e), e
    else:
        raise AssertionError(f"rank {pipe.rank}: scales differing between processes taken")
    print(f"rank {pipe.rank}: scales differing between processes refused on every one",
          flush=True)
