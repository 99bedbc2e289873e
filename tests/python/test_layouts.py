"""Tensors between chunks keep their layout: a plain loop's next chunk gets the tensor itself,
and torch's kernels follow its strides (a reduction adds in another order over a transposed
view than over a contiguous copy), so a message carries a transposed view, a slice with gaps
and a channels-last tensor with their strides, each way: activations forward and their
gradients back. Bitwise against a plain loop in several schedules."""
import copy

import pytest
import torch
from torch import nn

import rrfp


class Transposing(nn.Module):
    """Sends a transposed view, and keeps the strides of what it received."""

    def __init__(self, width_in, width_out, last=False):
        super().__init__()
        self.lin = nn.Linear(width_in, width_out)
        self.last = last
        self.seen = []

    def forward(self, x):
        if x.shape[-1] != self.lin.in_features:  # a previous chunk's transposed output
            self.seen.append(x.stride())
            x = x.transpose(0, 1)
        y = self.lin(x)
        return y if self.last else y.transpose(0, 1)


class Slicing(nn.Module):
    """Sends a slice with gaps between its rows (half of each row)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(24, 48)

    def forward(self, x):
        return self.lin(x)[:, :24]


class ChannelsLast(nn.Module):
    def __init__(self, last=False):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.last = last

    def forward(self, x):
        y = self.conv(x)
        return y.sum(dim=(1, 2, 3)) if self.last else y.contiguous(
            memory_format=torch.channels_last)


class OneChannel(nn.Module):
    """First: a Linear over an NHWC image to one channel, permuted to NCHW: (N, 1, H, W) with
    strides (H*W, 1, W, 1), which torch calls contiguous and channels-last both (a size-1
    dimension's stride counts for nothing), and which the next convolution follows to a
    channels-last output. Then: that convolution, summed. Sent as contiguous, it arrived with
    the strides (H*W, H*W, W, 1), and the loss and every gradient came out apart."""

    def __init__(self, last=False):
        super().__init__()
        self.layer = nn.Conv2d(1, 4, 3, padding=1) if last else nn.Linear(3, 1)
        self.last = last
        self.seen = []

    def forward(self, x):
        if not self.last:
            return self.layer(x).permute(0, 3, 1, 2)
        self.seen.append(x.stride())
        return self.layer(x).sum(dim=(1, 2, 3))


MODELS = {
    "transposed": (lambda: [Transposing(24, 24), Transposing(24, 24),
                            Transposing(24, 8, last=True)], (16, 24), (16, 8)),
    "sliced": (lambda: [Slicing(), Slicing(), nn.Linear(24, 8)], (16, 24), (16, 8)),
    "channels_last": (lambda: [ChannelsLast(), ChannelsLast(last=True)], (8, 4, 6, 6), (8,)),
    "one_channel": (lambda: [OneChannel(), OneChannel(last=True)], (8, 6, 6, 3), (8,)),
}


def loss_fn(y, t):
    return ((y - t) ** 2).sum()


def plain(chunks, x, y, m):
    """A plain loop's step; returns its losses' sum, added in order."""
    total = None
    for xi, yi in zip(x.chunk(m), y.chunk(m)):
        h = xi
        for c in chunks:
            h = c(h)
        loss = loss_fn(h, yi)
        loss.backward()
        total = loss.detach() if total is None else total + loss.detach()
    return total


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("hint,split", [("bf", "off"), ("1f1b", "off"), ("bfw", "on")])
def test_a_layout_other_than_contiguous_trains_bitwise(model, hint, split):
    make, xshape, yshape = MODELS[model]
    torch.manual_seed(0)
    chunks = make()
    ref = copy.deepcopy(chunks)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(xshape, generator=g) * 100, torch.randn(yshape, generator=g)
    plain(ref, x, y, 4)
    pipe = rrfp.Pipeline(chunks, loss_fn, pp=len(chunks), microbatches=4, hint=hint,
                         split_backward=split, timeout=60)
    pipe.step(x, y)
    for c, r in zip(chunks, ref):
        for (name, p), q in zip(c.named_parameters(), r.parameters()):
            assert torch.equal(p.grad, q.grad), f"{model}: {name}"
        if isinstance(c, (Transposing, OneChannel)):  # the strides a plain loop's next gets
            assert c.seen == r.seen


class Summing(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(1))

    def forward(self, x):  # over every dimension but the first
        return x.sum(tuple(range(1, x.dim()))).unsqueeze(-1) * self.w


@pytest.mark.parametrize("share", ["expand", "unfold"])
def test_a_tensor_whose_elements_share_memory_keeps_its_strides(share):
    """Elements sharing memory (an expanded tensor, unfold's windows) travel with the memory
    their strides reach and arrive viewed with the same strides (between processes too:
    test_a_message_keeps_each_layout_through_encode_and_decode). They went contiguous, and a
    sum over them added in another order than over the producer's tensor: another loss and
    other gradients than a plain loop's."""
    class Sharing(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 1 if share == "expand" else 1010)

        def forward(self, x):
            h = self.lin(x)
            return h.expand(-1, 1000) if share == "expand" else h.unfold(1, 1000, 2)

    torch.manual_seed(0)
    chunks = [Sharing(), Summing()]
    ref = copy.deepcopy(chunks)
    x, y = torch.randn(8, 8) * 3, torch.randn(8, 1)
    want = plain(ref, x, y, 2)
    got = rrfp.Pipeline(chunks, loss_fn, pp=2, microbatches=2, timeout=60,
                        progress=None).step(x, y)
    assert torch.equal(got, want)
    for c, r in zip(chunks, ref):
        for p, q in zip(c.parameters(), r.parameters()):
            assert torch.equal(p.grad, q.grad)


class IntoBuffer(nn.Module):
    """Writes each output into the same memory of its own (a static output buffer)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.register_buffer("out", torch.zeros(4, 8))

    def forward(self, x):
        with torch.no_grad():
            torch.matmul(x, self.lin.weight.t(), out=self.out)
        return self.out


class Doubling(nn.Module):
    """Doubles its output's gradient in place, from a hook (torch asks hooks not to)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.register_full_backward_hook(lambda m, gi, go: None)  # its backward whole

    def forward(self, x):
        y = self.lin(x)
        if y.requires_grad:  # not in an evaluation
            y.register_hook(lambda g: g.mul_(2))
        return y


class AddBias(nn.Module):
    def __init__(self):
        super().__init__()
        self.b = nn.Parameter(torch.randn(4, 8))  # the input's shape: its gradient is the input's

    def forward(self, x):
        return x + self.b


@pytest.mark.parametrize("hint,policy,split", [("1f1b", "fixed", "off"), ("bf", "ready", "off"),
                                               ("bfw", "ready", "on"), ("zb-h1", "fixed", "on")])
def test_a_message_is_the_producers_tensor_as_its_task_ended(hint, policy, split):
    """In one process a message holds tensors, not bytes, but copies of them made as the
    producer's task ends, as bytes were: a producer that writes its next microbatch's output
    into the same memory, and a hook that doubles the gradient it receives in place (which is
    the consumer's own gradient of a parameter added to its input), change nothing the
    consumer has. Sharing the memory instead gave other losses, gradients and outputs."""
    torch.manual_seed(0)
    chunks = [IntoBuffer(), AddBias(), Doubling(), AddBias(), nn.Linear(8, 8)]
    ref = copy.deepcopy(chunks)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(24, 8, generator=g), torch.randn(24, 8, generator=g)
    plain(ref, x, y, 6)
    slow = lambda stage, kind, chunk, mb: 0.01 if stage == 1 and kind == "F" else 0.0  # noqa
    pipe = rrfp.Pipeline(chunks, loss_fn, pp=5, microbatches=6, hint=hint, policy=policy,
                         split_backward=split, delay_fn=slow, timeout=60)
    pipe.step(x, y)
    for i, (c, r) in enumerate(zip(chunks, ref)):
        for (name, p), q in zip(c.named_parameters(), r.parameters()):
            assert (p.grad is None) == (q.grad is None), f"chunk {i} {name}"
            assert p.grad is None or torch.equal(p.grad, q.grad), f"chunk {i} {name}"
    out, _ = pipe.eval_step(x)
    with torch.no_grad():
        want = []
        for h in x.chunk(6):
            for c in ref:
                h = c(h)
            want.append(h.clone())  # the first chunk's output is its buffer
    assert torch.equal(out, torch.cat(want))


def _header(t):
    """The message of `t`, whose header holds a magic number (4 bytes), dtype, ndim,
    layout, pad, then ndim sizes and (for a layout other than contiguous) ndim strides."""
    return rrfp._rrfp._payload_bytes(t).clone()


def test_a_message_keeps_each_layout_through_encode_and_decode():
    x = torch.arange(24.0).reshape(2, 3, 4)
    one_channel = torch.arange(16.0).reshape(1, 4, 4, 1).permute(0, 3, 1, 2)  # "contiguous"
    for t in (x, x.transpose(0, 2), x[:, :, ::2], x.contiguous(memory_format=torch.contiguous_format),
              x[:, :1].expand(2, 3, 4), x.reshape(24)[3:].unfold(0, 4, 2), torch.empty(0, 3),
              torch.empty(0, 3).expand(2, 0, 3), one_channel):
        got = rrfp._rrfp._payload_tensor(_header(t))
        assert torch.equal(got, t)
        if t.numel() > 0:
            assert got.stride() == t.stride(), (got.stride(), t.stride())


def test_a_shared_tensor_spanning_far_more_than_its_elements_goes_contiguous():
    """A broadcast slice of a large activation (h[:, :1].expand(...)) reaches 96 times its
    elements: it travels contiguous, at its own size, and arrives with its values."""
    h = torch.randn(4, 1024, 256)
    t = h[:, 0:1].expand(-1, 8, -1)
    message = _header(t)
    assert message.numel() < 2 * t.numel() * t.element_size()
    got = rrfp._rrfp._payload_tensor(message)
    assert torch.equal(got, t) and got.is_contiguous()
    held = rrfp._rrfp._message_copy(t)
    assert torch.equal(held, t) and held.storage().size() == t.numel()


def test_a_held_copy_is_what_a_message_of_bytes_decodes_to():
    """Between stages of one process a message holds a copy (rrfp/_device.py hands a GPU's over
    through the same function): its values, strides and memory span are a decoded message's, so
    one process and many give a chunk the same input."""
    x = torch.arange(24.0).reshape(2, 3, 4)
    image = torch.arange(48.0).reshape(1, 3, 4, 4).contiguous(memory_format=torch.channels_last)
    for t in (x, x.transpose(0, 2), x[:, :, ::2], image, x[:, :1].expand(2, 3, 4),
              x.reshape(24)[3:].unfold(0, 4, 2), torch.empty(0, 3), torch._neg_view(x),
              torch.arange(16.0).reshape(1, 4, 4, 1).permute(0, 3, 1, 2)):
        held = rrfp._rrfp._message_copy(t)
        decoded = rrfp._rrfp._payload_tensor(_header(t))
        assert torch.equal(held, t) and not held.is_neg()
        assert held.stride() == decoded.stride(), (held.stride(), decoded.stride())
        assert held.storage().size() == decoded.storage().size()
        assert t.numel() == 0 or held.data_ptr() != t.data_ptr()


@pytest.mark.parametrize("what,edit", [
    ("layout code 4", lambda b: b.__setitem__(6, 4)),
    # Shared memory: its bytes must be the span its strides reach.
    ("48 data bytes for 120", lambda b: (b.__setitem__(6, 3), b[8 + 2 * 8:8 + 3 * 8].copy_(
        torch.tensor([7], dtype=torch.int64).view(torch.uint8)))),
    ("a stride out of range", lambda b: b[8 + 2 * 8:8 + 3 * 8].copy_(
        torch.tensor([-1], dtype=torch.int64).view(torch.uint8))),
    ("strides outside the data", lambda b: b[8 + 2 * 8:8 + 3 * 8].copy_(
        torch.tensor([7], dtype=torch.int64).view(torch.uint8))),
    ("strides reaching too far", lambda b: b[8 + 2 * 8:8 + 3 * 8].copy_(
        torch.tensor([1 << 40], dtype=torch.int64).view(torch.uint8))),
])
def test_a_corrupt_layout_is_a_protocol_error(what, edit):
    """A message whose strides are bad is refused naming why (the receiver would otherwise
    read past its bytes, or allocate what they reach)."""
    b = _header(torch.arange(12.0).reshape(3, 4).t())  # dense: layout 1, strides (1, 4)
    assert int(b[6]) == 1
    edit(b)
    if what == "strides reaching too far":
        b[6] = 2  # scattered: the span is allocated, bounded
    with pytest.raises(rrfp.ProtocolError, match=what):
        rrfp._rrfp._payload_tensor(b)


def test_a_lazily_negated_tensor_arrives_negated():
    """The imaginary part of a conjugate view (z.conj().imag, as a spectral layer takes it) is
    a tensor whose negation is a flag beside its memory (is_neg()): its message carried the
    memory alone, and the next chunk got it with the sign dropped (a loss of 4.3 for the
    loop's 0.006)."""
    z = torch.fft.fft(torch.arange(12.0).reshape(3, 4))
    r = torch.arange(12.0).reshape(3, 4)
    # Contiguous, dense (a transposed view: its memory as it lies) and scattered.
    for t in (z.conj().imag[:, 1:2], torch._neg_view(r), torch._neg_view(r.t()),
              z.conj().imag[:, ::2]):
        assert t.is_neg()
        got = rrfp._rrfp._payload_tensor(_header(t))
        assert torch.equal(got, t) and not got.is_neg()

    class Spectral(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return torch.fft.fft(self.lin(x)).conj().imag[:, 1:2]

    torch.manual_seed(0)
    chunks = [Spectral(), nn.Linear(1, 4)]
    ref = copy.deepcopy(chunks)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(4, 4, generator=g), torch.randn(4, 4, generator=g)
    plain(ref, x, y, 4)  # a column of one-row microbatches: contiguous, and negated
    pipe = rrfp.Pipeline(chunks, loss_fn, pp=2, microbatches=4, timeout=60)
    pipe.step(x, y)
    for c, r in zip(chunks, ref):
        for p, q in zip(c.parameters(), r.parameters()):
            assert torch.equal(p.grad, q.grad)
