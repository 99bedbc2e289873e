"""What fine-tuning scripts do between and around steps, each checked against a plain loop:
parameters frozen, unfrozen or replaced after the pipeline was built count as they are at the
step, and one a forward freezes or unfreezes during the step fails it; hooks on parameters
(p.register_hook) run on each microbatch's gradient, all of a tied parameter's uses summed,
before it is added, as a plain loop's backward runs them; and inputs or targets that require
grad, whose gradient a step cannot carry out of the pipeline, are refused rather than silently
left without it."""
import pytest
import torch
from torch import nn

import rrfp

SCHEDULES = [("bf", "ready"), ("bfw", "ready"), ("interleaved-1f1b", "fixed")]


def loss_fn(y, t):
    return ((y - t) ** 2).sum()


def chunks():
    torch.manual_seed(0)
    return [nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(4)]


def data(seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(8, 8, generator=g), torch.randn(8, 8, generator=g)


def plain_step(model, x, y, m=4):
    for xi, yi in zip(x.chunk(m), y.chunk(m)):
        h = xi
        for c in model:
            h = c(h)
        loss_fn(h, yi).backward()


def pipeline(model, hint, policy):
    return rrfp.Pipeline(model, loss_fn, pp=2, vpp=2, microbatches=4, hint=hint, policy=policy,
                         timeout=60, delay_fn=lambda s, k, c, mb: 0.0003 * ((mb + s) % 2))


def assert_same_grads(a, b):
    for p, q in zip([p for c in a for p in c.parameters()], [p for c in b for p in c.parameters()]):
        assert (p.grad is None) == (q.grad is None)
        if p.grad is not None:
            assert torch.equal(p.grad, q.grad)


def set_trainable(model, chunk, on):
    for p in model[chunk].parameters():
        p.requires_grad_(on)


@pytest.mark.parametrize("hint,policy", SCHEDULES)
def test_freezing_and_unfreezing_after_construction_count_at_the_step(hint, policy):
    ref, model = chunks(), chunks()
    for m in (ref, model):
        set_trainable(m, 0, False)
    pipe = pipeline(model, hint, policy)
    x, y = data()
    pipe.step(x, y)
    plain_step(ref, x, y)
    assert_same_grads(ref, model)
    assert model[0][0].weight.grad is None
    for m in (ref, model):  # the backbone joins in, and another chunk stops training
        set_trainable(m, 0, True)
        set_trainable(m, 2, False)
    kept = model[2][0].weight.grad.clone()
    x, y = data(2)
    pipe.step(x, y)
    plain_step(ref, x, y)
    assert_same_grads(ref, model)
    assert model[0][0].weight.grad is not None  # trained now
    assert torch.equal(model[2][0].weight.grad, kept)  # frozen: left as it was


def test_a_parameter_replaced_after_construction_gets_its_gradient():
    ref, model = chunks(), chunks()
    pipe = pipeline(model, "bf", "ready")
    w = torch.randn(8, 8, generator=torch.Generator().manual_seed(5))
    for m in (ref, model):
        m[1][0].weight = nn.Parameter(w.clone())
    x, y = data()
    pipe.step(x, y)
    plain_step(ref, x, y)
    assert model[1][0].weight.grad is not None
    assert_same_grads(ref, model)


@pytest.mark.parametrize("hint,policy", SCHEDULES)
def test_parameter_hooks_run_on_each_microbatchs_gradient_in_order(hint, policy):
    ref, model = chunks(), chunks()
    seen = {id(ref): [], id(model): []}
    for m in (ref, model):
        # Not linear, so the gradient it runs on matters; and a record of what it saw.
        m[2][0].weight.register_hook(lambda g: g.clamp(-0.05, 0.05))
        m[1][0].bias.register_hook(lambda g, log=seen[id(m)]: log.append(g.clone()))
        m[3][0].bias.register_hook(lambda g: None)  # returns nothing: the gradient stays
    pipe = pipeline(model, hint, policy)
    x, y = data()
    pipe.step(x, y)
    plain_step(ref, x, y)
    assert_same_grads(ref, model)
    assert len(seen[id(model)]) == 4  # once a microbatch, in microbatch order
    for a, b in zip(seen[id(ref)], seen[id(model)]):
        assert torch.equal(a, b)


class Tied(nn.Module):
    """A layer used by chunks 0 and 3 (stages 0 and 1): one parameter, two users."""

    def __init__(self, shared):
        super().__init__()
        self.shared = shared
        self.own = nn.Linear(8, 8)

    def forward(self, x):
        return torch.tanh(self.own(self.shared(x)))


def tied_chunks():
    torch.manual_seed(0)
    shared = nn.Linear(8, 8)
    return [Tied(shared), nn.Sequential(nn.Linear(8, 8), nn.Tanh()),
            nn.Sequential(nn.Linear(8, 8), nn.Tanh()), Tied(shared)]


@pytest.mark.parametrize("hint,policy", SCHEDULES)
def test_a_tied_parameters_hook_runs_on_its_uses_summed(hint, policy):
    ref, model = tied_chunks(), tied_chunks()
    for m in (ref, model):
        m[0].shared.weight.register_hook(lambda g: g.sign() * g.abs().sqrt())
    pipe = pipeline(model, hint, policy)
    x, y = data()
    pipe.step(x, y)
    plain_step(ref, x, y)
    assert torch.equal(model[0].shared.weight.grad, ref[0].shared.weight.grad)
    assert_same_grads(ref, model)


def test_inputs_or_targets_that_require_grad_are_refused_and_change_nothing():
    model = chunks()
    pipe = pipeline(model, "bf", "ready")
    x, y = data()
    encoder = nn.Linear(8, 8)  # outside the pipeline: a plain loop would train it
    with pytest.raises(ValueError, match="inputs: microbatch 0 holds a tensor that requires grad"):
        pipe.step(encoder(x), y)
    leaves = [t.clone().requires_grad_(True) for t in x.chunk(4)]
    with pytest.raises(ValueError, match="inputs: microbatch 0 .*detach"):
        pipe.step([(x.chunk(4)[i], {"h": leaves[i]}) if i == 0 else leaves[i] for i in range(4)],
                  list(y.chunk(4)))
    with pytest.raises(ValueError, match="targets: microbatch 0 .*inside loss_fn"):
        pipe.step(x, encoder(y))
    assert all(p.grad is None for c in model for p in c.parameters())
    assert encoder.weight.grad is None
    outputs, loss = pipe.eval_step(encoder(x), y)  # nothing flows back from an evaluation
    assert outputs.shape == (8, 8) and loss is not None
    pipe.step(x, y)  # and the pipeline trains on
    assert all(p.grad is not None for c in model for p in c.parameters())


class Probe(nn.Module):
    """A chunk that records whether its input wants a gradient."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.wanted = []

    def forward(self, x):
        self.wanted.append(x.requires_grad)
        return self.inner(x)


@pytest.mark.parametrize("hint,policy", SCHEDULES)
def test_a_frozen_chunks_output_arrives_wanting_no_gradient(hint, policy):
    # As in a plain loop: nothing before it trains, so the next chunk computes no input
    # gradient for it (it used to arrive as a leaf that wants one).
    ref, model = chunks(), chunks()
    for m in (ref, model):
        set_trainable(m, 0, False)
    model[1] = Probe(model[1])
    pipe = pipeline(model, hint, policy)
    x, y = data()
    pipe.step(x, y)
    plain_step(ref, x, y)
    assert model[1].wanted == [False] * 4
    assert_same_grads(ref, [model[0], model[1].inner, model[2], model[3]])


class IgnoresNarrow(nn.Module):
    """A chunk whose output does not depend on its input for a microbatch of one row (a
    learned constant instead): no gradient flows back to the chunks before it then."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.const = nn.Parameter(torch.ones(1, 8))

    def forward(self, x):
        return self.const * 2.0 if x.shape[0] == 1 else self.inner(x)


@pytest.mark.parametrize("hint,policy", SCHEDULES)
@pytest.mark.parametrize("rows", [[1, 1, 1, 1], [2, 1, 3, 1]])
def test_an_output_that_ignores_its_input_sends_no_gradient_back(hint, policy, rows):
    # In a plain loop the chunks before get no gradient from such a microbatch: with every
    # microbatch so, their .grad stays None. The pipeline used to send zeros back, which gave
    # them gradients of zeros that an optimizer applies (weight decay, momentum).
    ref, model = chunks(), chunks()
    for m in (ref, model):
        m[2] = IgnoresNarrow(m[2])
    x, y = data()
    xs, ys = list(x[:sum(rows)].split(rows)), list(y[:sum(rows)].split(rows))
    pipe = pipeline(model, hint, policy)
    pipe.step(xs, ys)
    for xi, yi in zip(xs, ys):
        h = xi
        for c in ref:
            h = c(h)
        loss_fn(h, yi).backward()
    assert_same_grads(ref, model)
    assert (model[0][0].weight.grad is None) == (max(rows) == 1)


class LowRankSum(nn.Module):
    """x @ (base + delta): autograd hands both terms the same gradient tensor. `base` may be
    another chunk's too (tied)."""

    def __init__(self, base=None):
        super().__init__()
        self.base = base if base is not None else nn.Parameter(torch.randn(8, 8) * 0.3)
        self.delta = nn.Parameter(torch.randn(8, 8) * 0.1)

    def forward(self, x):
        return torch.tanh(x @ (self.base + self.delta))


def low_rank_chunks():
    torch.manual_seed(0)
    first = LowRankSum()
    return [first, LowRankSum(), LowRankSum(), LowRankSum(first.base)]  # chunk 3 ties chunk 0's


@pytest.mark.parametrize("hint,policy", SCHEDULES)
def test_parameters_handed_one_gradient_tensor_keep_sums_of_their_own(hint, policy):
    # The running sums are added to in place: holding the tensor autograd handed both terms,
    # one parameter's additions went into the other's sum too, silently.
    ref, model = low_rank_chunks(), low_rank_chunks()
    pipe = pipeline(model, hint, policy)
    x, y = data()
    pipe.step(x, y)
    plain_step(ref, x, y)
    assert_same_grads(ref, model)


class SummedOffset(nn.Module):
    """A parameter used through .sum(): autograd hands it an expanded gradient (one element seen
    through every index), which cannot be added to in place."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.offset = nn.Parameter(torch.randn(4))

    def forward(self, x):
        return torch.tanh(self.lin(x) + self.offset.sum())


def test_a_parameter_whose_gradient_comes_expanded_is_summed():
    # Kept as the running sum, the expanded gradient failed the second microbatch's addition.
    def build():
        torch.manual_seed(0)
        return [SummedOffset() for _ in range(4)]
    ref, model = build(), build()
    pipe = pipeline(model, "bf", "ready")
    x, y = data()
    pipe.step(x, y)
    plain_step(ref, x, y)
    assert_same_grads(ref, model)


class Toggles(nn.Module):
    """A module that changes its own weight's requires_grad in its forward at its `at`-th call
    (a freezing schedule kept inside the model), after using it, or before with `first`."""

    def __init__(self, at, on=False, first=False):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.at, self.on, self.first, self.calls = at, on, first, 0
        if on:
            self.lin.weight.requires_grad_(False)

    def forward(self, x):
        self.calls += 1
        if self.first and self.calls == self.at:
            self.lin.weight.requires_grad_(self.on)
        y = torch.tanh(self.lin(x))
        if not self.first and self.calls == self.at:
            self.lin.weight.requires_grad_(self.on)
        return y


def toggling(at, **kw):
    torch.manual_seed(0)
    return [nn.Sequential(nn.Linear(8, 8), nn.Tanh()), Toggles(at, **kw)]


@pytest.mark.parametrize("hint,policy,split", [("1f1b", "fixed", "off"), ("gpipe", "fixed", "off"),
                                               ("bf", "ready", "off"), ("bfw", "ready", "on"),
                                               ("zb-h1", "fixed", "on")])
@pytest.mark.parametrize("at", [1, 2, 4])
def test_a_weight_its_own_forward_freezes_fails_the_step_then_trains_frozen(hint, policy, split,
                                                                            at):
    # A plain loop gives a weight frozen at microbatch k's forward the gradients of the
    # microbatches before k: 1F1B and BF ran those backward tasks before the freeze as the loop
    # does, GPipe, BFW and ZB-H1 ran none, and the weight's .grad came out None, silently. At
    # the first microbatch every order agreed, but the step cannot tell that case from the
    # others.
    model = toggling(at)
    pipe = rrfp.Pipeline(model, loss_fn, pp=2, microbatches=4, hint=hint, policy=policy,
                         split_backward=split, timeout=60)
    x, y = data()
    with pytest.raises(rrfp.StageError) as e:
        pipe.step(x, y)
    assert isinstance(e.value.__cause__, RuntimeError)
    assert "chunk 1's 'lin.weight': its requires_grad changed during the step (frozen" in \
        str(e.value.__cause__)
    assert all(p.grad is None for c in model for p in c.parameters())  # the step wrote nothing
    # The next step begins with the weight frozen, and trains as a plain loop from there.
    ref = toggling(at)
    ref[1].lin.weight.requires_grad_(False)
    for s in range(2):
        x, y = data(s + 2)
        pipe.step(x, y)
        plain_step(ref, x, y)
        assert_same_grads(ref, model)
        assert model[1].lin.weight.grad is None and model[1].lin.bias.grad is not None


@pytest.mark.parametrize("first", [True, False])
def test_a_weight_its_own_forward_unfreezes_fails_the_step(first):
    # Unfrozen before its use, the weight reached the backward as a tensor outside the chunk's
    # parameters (refused as another chunk's would be, in misleading words); after its last use,
    # nothing told.
    model = toggling(4, on=True, first=first)
    pipe = rrfp.Pipeline(model, loss_fn, pp=2, microbatches=4, hint="1f1b", policy="fixed",
                         timeout=60)
    with pytest.raises(rrfp.StageError) as e:
        pipe.step(*data())
    assert "chunk 1's 'lin.weight': its requires_grad changed during the step (unfrozen" in \
        str(e.value.__cause__)
    assert all(p.grad is None for c in model for p in c.parameters())
    pipe.step(*data(2))  # unfrozen as this step begins: trained
    assert model[1].lin.weight.grad is not None


@pytest.mark.parametrize("hint,policy", SCHEDULES)
def test_a_model_frozen_everywhere_is_refused_as_a_plain_loop_refuses_it(hint, policy):
    # A plain loop's backward raises where the loss wants no gradient; the pipeline returned
    # the loss and trained nothing. Frozen up to the last chunk alone, it trains that one.
    model = chunks()
    pipe = pipeline(model, hint, policy)
    x, y = data()
    for c in range(4):
        set_trainable(model, c, False)
    with pytest.raises(RuntimeError, match="does not require grad"):
        plain_step(model, x, y)
    with pytest.raises(rrfp.StageError, match="no microbatch's loss requires grad"):
        pipe.step(x, y)
    assert all(p.grad is None for c in model for p in c.parameters())
    assert pipe.eval_step(x, y)[1] is not None  # an evaluation wants no gradient
    set_trainable(model, 3, True)
    ref = chunks()
    for c in range(3):
        set_trainable(ref, c, False)
    pipe.step(x, y)
    plain_step(ref, x, y)
    assert_same_grads(ref, model)


@pytest.mark.parametrize("hint,policy", SCHEDULES)
def test_a_microbatch_whose_loss_wants_no_gradient_is_skipped_as_a_summed_loop_skips_it(
        hint, policy):
    # A loss_fn giving a constant for a microbatch (all padding, say) leaves that microbatch no
    # backward, as a plain loop summing the losses before its backward does (the reference:
    # one backward a microbatch, skipping those); the others train. Its B failed in autograd.
    model, ref = chunks(), chunks()

    def some_constant(y, t):
        return torch.zeros(()) if t[0, 0] > 0 else loss_fn(y, t)

    pipe = rrfp.Pipeline(model, some_constant, pp=2, vpp=2, microbatches=4, hint=hint,
                         policy=policy, timeout=60)
    x, y = data()
    y[:, 0] = -1.0
    y[0, 0] = y[4, 0] = 1.0  # microbatches 0 and 2 (two rows each)
    for xi, yi in zip(x.chunk(4), y.chunk(4)):
        h = xi
        for c in ref:
            h = c(h)
        loss = some_constant(h, yi)
        if loss.requires_grad:
            loss.backward()
    pipe.step(x, y)
    assert_same_grads(ref, model)
