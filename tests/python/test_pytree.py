"""Structures between chunks: tuples, lists and dicts of tensors (and non-tensor constants),
and tensors inside dataclasses and other objects, cross a chunk boundary, and gradients flow to
every floating-point tensor that needs one, bitwise as a plain loop, in every schedule, policy
and split backward."""
import collections
import dataclasses
import random

import pytest
import torch
from torch import nn
import torch.nn.functional as F

import lm
import rrfp

VOCAB, D = 64, 16


class LstmFirst(nn.Module):
    """Token ids -> (output, (h, c)), as an RNN's first layers hand on their state."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.rnn = nn.LSTM(D, D, batch_first=True)

    def forward(self, ids):
        return self.rnn(self.emb(ids))


class LstmMiddle(nn.Module):
    """(output, (h, c)) -> (output, (h, c)): the next layer starts from the state it is given."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(D, D, batch_first=True)

    def forward(self, x):
        out, (h, c) = x
        return self.rnn(out, (h, c))


class LstmHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(D, D, batch_first=True)
        self.head = nn.Linear(2 * D, VOCAB)

    def forward(self, x):
        out, (h, c) = x
        y, _ = self.rnn(out, (h, c))
        # The final state feeds the head too, so the gradient reaches h and c of the message.
        return self.head(torch.cat([y, (h + c)[-1].unsqueeze(1).expand_as(y)], dim=-1))


def lstm_lm(n):
    torch.manual_seed(11)
    return [LstmFirst()] + [LstmMiddle() for _ in range(n - 2)] + [LstmHead()]


class MaskedFirst(nn.Module):
    """Token ids -> {"h", "mask" (bool), "pos" (int), "scale" (a float constant), "unused"}."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.side = nn.Linear(D, D)

    def forward(self, ids):
        h = self.emb(ids)
        mask = ids % 3 != 0
        return {"h": h, "mask": mask, "pos": torch.arange(ids.shape[1]), "scale": 0.5,
                "unused": self.side(h)}  # a float output nobody downstream reads


class MaskedBlock(nn.Module):
    def __init__(self, last=False):
        super().__init__()
        self.lin = nn.Linear(D, D)
        self.head = nn.Linear(D, VOCAB) if last else None

    def forward(self, x):
        h = x["h"] + x["scale"] * torch.tanh(self.lin(x["h"])) * x["mask"].unsqueeze(-1)
        h = h + 0.01 * x["pos"].unsqueeze(-1)
        if self.head is not None:
            return self.head(h)
        return dict(x, h=h)  # mask, pos, scale and unused travel on


def masked(n):
    torch.manual_seed(12)
    return [MaskedFirst()] + [MaskedBlock() for _ in range(n - 2)] + [MaskedBlock(last=True)]


@dataclasses.dataclass
class Hidden:
    h: torch.Tensor
    mask: torch.Tensor
    carry: "Carry"


class Carry:
    """An object of the user's own holding a tensor that wants its gradient."""

    def __init__(self, t):
        self.t = t


class Output(collections.OrderedDict):
    """A model-output class, as libraries define them: a dict subclass pytree does not open."""


class ObjectFirst(MaskedFirst):
    """Token ids -> Output(hidden=Hidden(h, mask, Carry(t))): tensors inside objects."""

    def forward(self, ids):
        h = self.emb(ids)
        return Output(hidden=Hidden(h, ids % 3 != 0, Carry(torch.tanh(self.side(h)))))


class ObjectBlock(MaskedBlock):
    def forward(self, x):
        s = x["hidden"]
        h = s.h + torch.tanh(self.lin(s.h)) * s.mask.unsqueeze(-1) + 0.1 * s.carry.t
        if self.head is not None:
            return self.head(h)
        return Output(hidden=Hidden(h, s.mask, Carry(0.5 * s.carry.t)))


def objects(n):
    torch.manual_seed(13)
    return [ObjectFirst()] + [ObjectBlock() for _ in range(n - 2)] + [ObjectBlock(last=True)]


def loss_fn(logits, target):
    return F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))


def delays(seed):
    def fn(stage, kind, chunk, mb):
        r = random.Random(f"{seed}-{stage}-{kind}-{chunk}-{mb}")
        return r.random() * 0.003 if r.random() < 0.3 else 0.0
    return fn


def train(chunks, step_fn, steps=2, m=4):
    opt = torch.optim.SGD([p for c in chunks for p in c.parameters()], lr=0.1)
    losses = []
    for s in range(steps):
        xs, ys = lm.batches(m, seed=s, vocab=VOCAB)
        opt.zero_grad()
        losses.append(step_fn(xs, ys))
        opt.step()
    return losses


def reference(chunks):
    return lambda xs, ys: lm.reference_step(chunks, xs, ys, loss_of=loss_fn)


CASES = [  # (name, hint, policy, split)
    ("fixed 1f1b", "1f1b", "fixed", "off"),
    ("ready bf", "bf", "ready", "off"),
    ("ready bfw split", "bfw", "ready", "on"),
    ("fixed zb-h1 split", "zb-h1", "fixed", "on"),
]


MODELS = {"lstm": lstm_lm, "masked dict": masked, "objects": objects}


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("name,hint,policy,split", CASES, ids=[c[0] for c in CASES])
def test_structures_between_chunks_train_bitwise(model, name, hint, policy, split):
    # "objects": a dataclass, an object of the user's own and a dict subclass around the
    # tensors; pickled whole, their tensors used to arrive without a graph, and the chunks
    # before got no gradient through them.
    build = MODELS[model]
    ref = build(4)
    want = train(ref, reference(ref))
    chunks = build(4)
    pipe = rrfp.Pipeline(chunks, loss_fn, pp=4, microbatches=4, hint=hint, policy=policy,
                         split_backward=split, delay_fn=delays(len(name)))
    got = train(chunks, pipe.step)
    for s, (a, b) in enumerate(zip(got, want)):
        assert torch.equal(a, b), f"step {s}: {a} != {b}"
    for i, (a, b) in enumerate(zip(ref, chunks)):
        for (n, p), q in zip(a.named_parameters(), b.parameters()):
            assert torch.equal(p, q), f"chunk {i} {n} differs"


def test_every_tensor_of_a_structure_gets_its_gradient():
    # The state (h, c) handed from chunk 0 carries a gradient back: chunk 0's LSTM weights get
    # the part that flows through h and c, not only through the output sequence.
    chunks = lstm_lm(2)
    pipe = rrfp.Pipeline(chunks, loss_fn, pp=2, microbatches=2, hint="bf")
    xs, ys = lm.batches(2, seed=4, vocab=VOCAB)
    pipe.step(xs, ys)
    ref = lstm_lm(2)
    lm.reference_step(ref, xs, ys, loss_of=loss_fn)
    for (n, p), q in zip(ref[0].named_parameters(), chunks[0].parameters()):
        assert q.grad is not None and torch.equal(p.grad, q.grad), n
    # A head that ignores (h, c): chunk 0's weights then get only the output's part, which
    # differs, so the check above sees the state's gradient for real.
    ref2 = lstm_lm(2)
    ref2[1].forward = lambda x, m=ref2[1]: m.head(torch.cat([m.rnn(x[0])[0]] * 2, dim=-1))
    lm.reference_step(ref2, xs, ys, loss_of=loss_fn)
    assert not torch.equal(ref2[0].rnn.weight_hh_l0.grad, ref[0].rnn.weight_hh_l0.grad)


def test_unpicklable_constants_are_named():
    class Lambda(nn.Module):
        def forward(self, ids):
            return {"ids": ids, "fn": lambda: 0}

    pipe = rrfp.Pipeline([Lambda(), lm.chunks(1)[0]], lm.loss_fn, pp=2, microbatches=2)
    with pytest.raises(rrfp.StageError, match="chunk 0 returned a dict whose non-tensor parts "
                                              "cannot be sent"):
        pipe.step(*lm.batches(2))


class Halving(torch.Tensor):
    """A subclass whose sums are halved: it arrived on the next chunk as a plain tensor, which
    summed twice as much, silently."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs or {})
        return out * 0.5 if func is torch.Tensor.sum else out


@pytest.mark.parametrize("wrap", [lambda t: t, lambda t: (t, 3), lambda t: {"h": [t]}])
def test_a_tensor_subclass_between_chunks_is_refused_by_name(wrap):
    class Makes(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return wrap(self.lin(x).as_subclass(Halving))

    pipe = rrfp.Pipeline([Makes(), nn.Identity()], lambda y, t: torch.tensor(0.0), pp=2,
                         microbatches=1, progress=None)
    xs = [torch.randn(2, 4)]
    for call in (pipe.step, pipe.eval_step):
        with pytest.raises(rrfp.StageError, match="F c0 m0 failed") as e:
            call(xs)
        assert isinstance(e.value.__cause__, TypeError)
        assert "chunk 0 returned a Halving, a subclass of torch.Tensor" in str(e.value.__cause__)
    # A parameter is a subclass that means nothing more: it goes, as a plain tensor would.
    pipe = rrfp.Pipeline([nn.Linear(4, 4), nn.Identity()], lambda y, t: y.sum(), pp=2,
                         microbatches=1, progress=None)
    pipe.chunks[0].forward = lambda x: pipe.chunks[0].weight
    pipe.step(xs)


def test_a_sparse_tensor_between_chunks_is_refused_naming_its_layout():
    # A graph's adjacency passed along with the node features (x, adj): the message took a
    # sparse tensor's memory, which it has none of, and failed with c10's raw error and stack.
    class Graph(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, got):
            x, adj = got
            return torch.tanh(torch.sparse.mm(adj, self.lin(x))), adj

    adj = torch.sparse_coo_tensor(torch.tensor([[0, 1, 2], [1, 2, 0]]), torch.ones(3), (3, 3))
    pipe = rrfp.Pipeline([Graph(), Graph()], lambda y, t: y[0].sum(), pp=2, microbatches=1)
    with pytest.raises(rrfp.StageError, match=r"F c0 m0: tensors of layout torch.sparse_coo "
                                              r"cannot be sent between stages") as e:
        pipe.step([(torch.randn(3, 4), adj.coalesce())])
    assert "Exception raised from" not in str(e.value)  # c10's stack, no longer


class PassOn(nn.Module):
    """Returns the linear's output beside what `make` builds from it."""

    def __init__(self, make):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.make = make

    def forward(self, x):
        if isinstance(x, tuple):
            x = x[0]
        y = self.lin(x)
        return y, self.make(y)


@pytest.mark.parametrize("make, says", [
    # torch 1.13's nested tensors report a strided layout: c10's raw error in the copy.
    (lambda y: torch.nested.nested_tensor([y.detach()[0], y.detach()[1, :2]]),
     r"nested tensors cannot be sent between stages: send its components \(unbind\(\)\)"),
    # The advice was the sparse layouts' (indices() and values()), which mkldnn has none of.
    (lambda y: y.detach().to_mkldnn(),
     r"tensors of layout torch._mkldnn cannot be sent between stages \(only strided ones "
     r"travel\): send it as a strided tensor \(to_dense\(\)\)"),
])
@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
def test_a_tensor_without_strided_values_between_chunks_is_refused_in_its_words(make, says):
    pipe = rrfp.Pipeline([PassOn(make), PassOn(make)], lambda y, t: y[0].sum(), pp=2,
                         microbatches=1)
    with pytest.raises(rrfp.StageError, match=r"F c0 m0: " + says) as e:
        pipe.step([torch.randn(3, 4)])
    assert "Exception raised from" not in str(e.value)


class WithBias(nn.Module):
    """Token ids -> {"h", "bias"}: a floating-point tensor made without a graph (from a buffer),
    as an attention bias or a table of positions is."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.register_buffer("table", torch.linspace(0, 1, D))

    def forward(self, ids):
        return {"h": self.emb(ids), "bias": self.table.expand(ids.shape[1], D) * 0.1}


class UsesBias(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(D, VOCAB)
        self.bias_wanted_grad = []

    def forward(self, x):
        self.bias_wanted_grad.append(x["bias"].requires_grad)
        return self.head(torch.tanh(x["h"] + x["bias"]))


def test_a_tensor_that_wanted_no_gradient_arrives_wanting_none():
    # It used to arrive as a leaf that wants a gradient: a backward through it for nothing.
    def build():
        torch.manual_seed(14)
        return [WithBias(), UsesBias()]
    ref, chunks = build(), build()
    xs, ys = lm.batches(4, seed=6, vocab=VOCAB)
    for x, y in zip(xs, ys):
        loss_fn(ref[1](ref[0](x)), y).backward()
    pipe = rrfp.Pipeline(chunks, loss_fn, pp=2, microbatches=4, hint="bfw")
    pipe.step(xs, ys)
    assert chunks[1].bias_wanted_grad == [False] * 4
    for a, b in zip(ref, chunks):
        for p, q in zip(a.parameters(), b.parameters()):
            assert torch.equal(p.grad, q.grad)


class Twice(nn.Module):
    """x -> (h, h): one tensor handed on under two names (a hidden state and its residual)."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(8, 8)

    def forward(self, x):
        h = self.l(x)
        return (h, h)


class UsesBoth(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 8))

    def forward(self, t):
        a, b = t
        return a * self.w[0] + b * self.w[1] + a * self.w[2]


@pytest.mark.parametrize("hint,policy", [("1f1b", "fixed"), ("bf", "ready"), ("bfw", "ready")])
def test_a_tensor_returned_twice_arrives_as_one(hint, policy):
    # It travelled as two leaves, each one's gradients summed on its own and the two sums added
    # at the sender: (u3 + u1) + u2 where the loop adds (u3 + u2) + u1, 20 of chunk 0's 64
    # weight gradients a few ulps off.
    def build():
        torch.manual_seed(0)
        return [Twice(), UsesBoth()]

    def loss(out, y):
        return ((out - y) ** 2).sum()

    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 8, generator=g), torch.randn(8, 8, generator=g)
    ref, chunks = build(), build()
    for xi, yi in zip(x.tensor_split(2), y.tensor_split(2)):
        loss(ref[1](ref[0](xi)), yi).backward()
    rrfp.Pipeline(chunks, loss, pp=2, microbatches=2, hint=hint, policy=policy,
                  split_backward="on" if hint == "bfw" else "off").step(x, y)
    for a, b in zip(ref, chunks):
        for (n, p), q in zip(a.named_parameters(), b.parameters()):
            assert torch.equal(p.grad, q.grad), n


@dataclasses.dataclass
class Batch:
    x: torch.Tensor


def test_inputs_holding_a_tensor_subclass_still_reach_the_device():
    # The subclass refusal is for messages between chunks: inputs moved to a device went through
    # it too, and fell back to pytree, which opens no dataclass (their tensors stayed behind).
    from rrfp._device import to_device

    moved = to_device(Batch(torch.ones(2).as_subclass(Halving)), torch.device("meta"))
    assert isinstance(moved, Batch) and moved.x.device.type == "meta"
