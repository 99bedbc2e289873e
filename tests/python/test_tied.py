"""Parameters that several chunks share (tied input/output embeddings, a module reused by
non-adjacent chunks): every use's gradient reaches the parameter, bitwise as a plain loop
adds them, in every schedule, policy, split backward and interleaving. Before, the last chunk
to finish set .grad to its own contribution alone."""
import random
import warnings
import zlib

import pytest
import torch
from torch import nn
import torch.nn.functional as F

import lm
import rrfp
import rrfp._autograd
from transformer_lm import Block, Embed

VOCAB, D = 64, 32


class TiedHead(nn.Module):
    """The output projection of a GPT with tied embeddings: logits = h @ E^T."""

    def __init__(self, embed):
        super().__init__()
        self.ln = nn.LayerNorm(D)
        self.embed = embed  # the first chunk's token embedding, the same object

    def forward(self, h):
        return F.linear(self.ln(h), self.embed.weight)


class Mix(nn.Module):
    """x + tanh(shared(x)): a shared module applied inside a chunk."""

    def __init__(self, shared):
        super().__init__()
        self.shared = shared

    def forward(self, x):
        return x + torch.tanh(self.shared(x))


def tied_gpt(n):
    """n chunks of a small GPT whose output projection is the input embedding's matrix."""
    torch.manual_seed(5)
    emb = Embed(D, 64, VOCAB)
    out = [nn.Sequential(emb, Block(D, 4))]
    out += [nn.Sequential(Block(D, 4)) for _ in range(n - 2)]
    out.append(nn.Sequential(Block(D, 4), TiedHead(emb.tok)))
    return out


def reused(n, users):
    """n chunks; one Linear(D, D) applied in each chunk of `users` (and an embedding first,
    a head last)."""
    torch.manual_seed(6)
    shared = nn.Linear(D, D)
    out = []
    for i in range(n):
        layers = [Embed(D, 64, VOCAB)] if i == 0 else []
        layers.append(Block(D, 4))
        if i in users:
            layers.append(Mix(shared))
        if i == n - 1:
            layers += [nn.LayerNorm(D), nn.Linear(D, VOCAB)]
        out.append(nn.Sequential(*layers))
    return out


def unique_params(chunks):
    seen, out = set(), []
    for c in chunks:
        for p in c.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out


def delays(seed):
    def fn(stage, kind, chunk, mb):
        r = random.Random(f"{seed}-{stage}-{kind}-{chunk}-{mb}")
        return r.random() * 0.003 if r.random() < 0.3 else 0.0
    return fn


def train(chunks, steps, m, step_fn, *, zero=True):
    """SGD over `steps` steps; step_fn(xs, ys) runs one step's forward and backward."""
    opt = torch.optim.SGD(unique_params(chunks), lr=0.05)
    losses = []
    for s in range(steps):
        xs, ys = lm.batches(m, seed=s, vocab=VOCAB)
        if zero:
            opt.zero_grad()
        losses.append(step_fn(xs, ys))
        opt.step()
    return losses


def assert_same(ref, got):
    for i, (a, b) in enumerate(zip(ref, got)):
        for (n, p), q in zip(a.named_parameters(), b.parameters()):
            assert torch.equal(p, q), f"chunk {i} {n} differs"


CASES = [  # (name, hint, policy, split, vpp)
    ("fixed 1f1b", "1f1b", "fixed", "off", 1),
    ("ready bf", "bf", "ready", "off", 1),
    ("ready bfw split", "bfw", "ready", "on", 1),
    ("ready bf interleaved", "bf", "ready", "off", 2),
    ("fixed interleaved-1f1b", "interleaved-1f1b", "fixed", "auto", 2),
]
MODELS = {  # name -> (builder of n chunks)
    "tied embeddings": tied_gpt,
    "reused by chunks 0 and 2": lambda n: reused(n, {0, 2}),
    "reused by three chunks": lambda n: reused(n, {0, 1, n - 1}),
}


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("name,hint,policy,split,vpp", CASES, ids=[c[0] for c in CASES])
def test_shared_parameters_get_every_use_bitwise(model, name, hint, policy, split, vpp):
    pp, m, steps = 2 if vpp == 2 else 4, 4, 3
    n = pp * vpp
    build = MODELS[model]
    ref = build(n)
    ref_losses = train(ref, steps, m, lambda xs, ys: lm.reference_step(ref, xs, ys))
    chunks = build(n)
    pipe = rrfp.Pipeline(chunks, lm.loss_fn, pp=pp, vpp=vpp, microbatches=m, hint=hint,
                         policy=policy, split_backward=split, delay_fn=delays(zlib.crc32(name.encode()) % 97))
    losses = train(chunks, steps, m, pipe.step)
    for s in range(steps):
        assert torch.equal(losses[s], ref_losses[s]), f"step {s}: {losses[s]} != {ref_losses[s]}"
    assert_same(ref, chunks)


def test_tied_gradient_is_every_use_not_the_last_chunk_alone():
    # The weak spot of the old code, shown directly: the shared weight's .grad after one step
    # differs from what either chunk alone contributes, and equals the plain loop's.
    ref = reused(4, {0, 2})
    xs, ys = lm.batches(4, seed=0, vocab=VOCAB)
    lm.reference_step(ref, xs, ys)
    chunks = reused(4, {0, 2})
    pipe = rrfp.Pipeline(chunks, lm.loss_fn, pp=4, microbatches=4, hint="bf")
    pipe.step(xs, ys)
    got, want = chunks[0][2].shared.weight.grad, ref[0][2].shared.weight.grad
    assert chunks[0][2].shared is chunks[2][1].shared
    assert torch.equal(got, want)
    # Chunk 2's use alone (the shared layer cut out of chunk 0) gives another gradient.
    alone = reused(4, {2})
    lm.reference_step(alone, xs, ys)
    assert not torch.equal(alone[2][1].shared.weight.grad, want)


def test_tied_gradients_accumulate_onto_existing_grad():
    # No zero_grad between steps: each step adds onto the .grad the previous left, as the
    # plain loop's backward does.
    ref = tied_gpt(4)
    train(ref, 2, 4, lambda xs, ys: lm.reference_step(ref, xs, ys), zero=False)
    chunks = tied_gpt(4)
    pipe = rrfp.Pipeline(chunks, lm.loss_fn, pp=4, microbatches=4, hint="bfw",
                         split_backward="on", delay_fn=delays(3))
    train(chunks, 2, 4, pipe.step, zero=False)
    assert_same(ref, chunks)


class Twice(nn.Module):
    """tanh(shared(tanh(shared(x)))): the shared layer used twice in one chunk."""

    def __init__(self, shared):
        super().__init__()
        self.shared = shared

    def forward(self, x):
        return torch.tanh(self.shared(torch.tanh(self.shared(x))))


class Once(nn.Module):
    def __init__(self, shared):
        super().__init__()
        self.shared = shared

    def forward(self, x):
        return torch.tanh(self.shared(x))


def twice(n, once=()):
    """n chunks sharing one Linear(D, D), each using it twice but those in `once`."""
    torch.manual_seed(7)
    shared = nn.Linear(D, D)
    return [Once(shared) if i in once else Twice(shared) for i in range(n)]


def squared(y, t):
    return ((y - t) ** 2).sum()


def plain_loop(chunks, xs, ys):
    for x, y in zip(xs, ys):
        for c in chunks:
            x = c(x)
        squared(x, y).backward()


MULTI_USE = [  # (name, hint, policy, split, pp, vpp, users using the layer once)
    ("bf", "bf", "ready", "off", 2, 1, ()),
    ("1f1b", "1f1b", "fixed", "off", 2, 1, ()),
    ("gpipe", "gpipe", "fixed", "off", 2, 1, ()),
    ("bfw split", "bfw", "ready", "on", 2, 1, ()),
    ("zb-h1 split", "zb-h1", "fixed", "on", 2, 1, ()),
    ("bf pp=1 vpp=3", "bf", "ready", "off", 1, 3, ()),
    ("bfw pp=1 vpp=3 split", "bfw", "ready", "on", 1, 3, ()),
    ("interleaved-1f1b vpp=2", "interleaved-1f1b", "fixed", "off", 2, 2, ()),
    ("bfw last chunk once", "bfw", "ready", "on", 2, 2, (3,)),
    ("bfw middle chunk once", "bfw", "ready", "on", 2, 2, (1,)),
]


@pytest.mark.parametrize("name,hint,policy,split,pp,vpp,once", MULTI_USE,
                         ids=[c[0] for c in MULTI_USE])
def test_parameter_used_twice_in_a_chunk_gets_a_plain_loops_bits(name, hint, policy, split, pp,
                                                                  vpp, once):
    # A chunk's own autograd call sums its two uses (u2 + u1) before the later chunks' buffer B
    # meets them, where a plain loop's one backward adds (B + u2) + u1: one ulp apart. The
    # chunk's call now starts from B.
    check_twice(name, hint, policy, split, pp, vpp, once)


def test_parameter_used_twice_in_a_chunk_with_a_module_hook_split():
    # A chunk with a module backward hook computes its whole backward in B (StageRunner.whole):
    # its tied gradient is put there too, for the chunks before it to start from.
    check_twice("hooked", "bfw", "ready", "on", 2, 2, (), hooked=1)


def check_twice(name, hint, policy, split, pp, vpp, once, hooked=None):
    n, m = pp * vpp, 8
    torch.manual_seed(11)
    x, y = torch.randn(4 * m, D), torch.randn(4 * m, D)
    ref = twice(n, once)
    plain_loop(ref, x.chunk(m), y.chunk(m))
    chunks = twice(n, once)
    if hooked is not None:
        chunks[hooked].register_full_backward_hook(lambda mod, gin, gout: None)
    pipe = rrfp.Pipeline(chunks, squared, pp=pp, vpp=vpp, microbatches=m, hint=hint,
                         policy=policy, split_backward=split, delay_fn=delays(zlib.crc32(name.encode()) % 89))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # exact: nothing to warn of
        pipe.step(x, y)
    for p, q in zip(ref[0].parameters(), chunks[0].parameters()):
        assert torch.equal(p.grad, q.grad), f"{name}: {(p.grad - q.grad).abs().max()}"


def test_parameter_used_twice_warns_where_its_uses_cannot_be_seeded(monkeypatch):
    # A torch whose autograd.grad runs a parameter's hooks itself would run them on the later
    # chunks' buffer again: that parameter's uses are summed on their own, and the pipeline
    # says so, once, naming it and the chunks.
    monkeypatch.setattr(rrfp._autograd, "ENGINE_RUNS_LEAF_HOOKS", True)
    chunks = twice(2)
    chunks[0].shared.weight.register_hook(lambda g: None)
    pipe = rrfp.Pipeline(chunks, squared, pp=2, microbatches=4, hint="1f1b")
    x, y = torch.randn(16, D), torch.randn(16, D)
    with pytest.warns(UserWarning, match=r"'shared.weight'.*chunk\(s\) 0\b"):
        pipe.step(x, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once a pipeline
        pipe.step(x, y)


@pytest.mark.parametrize("norm", ["weight_norm", "spectral_norm"])
def test_a_module_whose_hook_sets_its_weight_is_refused_across_stages(norm):
    # weight_norm's hook sets module.weight at each forward: two stages running the shared
    # module at once took each other's weight, and a later backward failed ("Trying to
    # backward through the graph a second time"), at random; the older spectral_norm's hook
    # does the same. Chunks of one stage run one at a time: allowed, and the same bits as a
    # plain loop.
    wrap = getattr(torch.nn.utils, norm)

    def model():
        torch.manual_seed(0)
        shared = wrap(nn.Linear(D, D))
        return [nn.Sequential(nn.Linear(D, D), shared), nn.Sequential(nn.Tanh(), shared)]

    with pytest.raises(ValueError, match=r"chunks: chunks 0 and 1 share '1', whose "
                                         r"(WeightNorm|SpectralNorm) hook sets its weight"):
        rrfp.Pipeline(model(), squared, pp=2, microbatches=4)
    if norm == "spectral_norm":  # its power iteration is a state: kept in order, not shared
        return
    x, y = torch.randn(16, D), torch.randn(16, D)
    chunks, ref = model(), model()
    rrfp.Pipeline(chunks, squared, pp=1, vpp=2, microbatches=4).step(x, y)
    plain_loop(ref, list(x.chunk(4)), list(y.chunk(4)))
    for p, q in zip(unique_params(ref), unique_params(chunks)):
        assert torch.equal(p.grad, q.grad)
