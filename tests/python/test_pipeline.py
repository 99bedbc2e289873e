"""rrfp.Pipeline on user-written modules: bitwise the result of a plain PyTorch loop, whatever
the schedule, policy, split backward, interleaving or injected delays."""
import os
import random

import pytest
import torch
from torch import nn

import lm
import rrfp

CASES = [  # (name, hint, policy, split, vpp)
    ("fixed 1f1b", "1f1b", "fixed", "off", 1),
    ("ready bf", "bf", "ready", "off", 1),
    ("ready bfw split", "bfw", "ready", "on", 1),
    ("ready adaptive split", "adaptive", "ready", "on", 1),
    ("fixed zb-h1 split", "zb-h1", "fixed", "on", 1),
    ("ready bf interleaved", "bf", "ready", "off", 2),
    ("fixed interleaved-1f1b", "interleaved-1f1b", "fixed", "auto", 2),
]


def delays(seed, scale=0.004):
    """Random delays before tasks: different dispatch orders from one seed to the next."""
    def fn(stage, kind, chunk, mb):
        r = random.Random(f"{seed}-{stage}-{kind}-{chunk}-{mb}")
        return r.random() * scale if r.random() < 0.3 else 0.0
    return fn


run_reference = lm.run_reference


@pytest.mark.parametrize("name,hint,policy,split,vpp", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("seed", [1, 2])
def test_bitwise_equal_to_a_plain_loop(name, hint, policy, split, vpp, seed):
    pp, m, steps = 2, 4, 3
    ref_chunks, ref_losses = run_reference(pp * vpp, steps, m)
    chunks = lm.chunks(pp * vpp)
    pipe = rrfp.Pipeline(chunks, lm.loss_fn, pp=pp, vpp=vpp, microbatches=m, hint=hint,
                         policy=policy, split_backward=split, delay_fn=delays(seed))
    opt = torch.optim.SGD([p for c in chunks for p in c.parameters()], lr=0.05)
    for s in range(steps):
        xs, ys = lm.batches(m, seed=s)
        opt.zero_grad()
        loss = pipe.step(xs, ys)
        assert torch.equal(loss, ref_losses[s]), f"step {s}: loss {loss} != {ref_losses[s]}"
        opt.step()
    for i, (a, b) in enumerate(zip(ref_chunks, chunks)):
        for (n, p), q in zip(a.named_parameters(), b.parameters()):
            assert torch.equal(p, q), f"chunk {i} {n} differs"
    rec = pipe.last_step
    assert rec.makespan > 0 and 0 <= rec.bubble < 1
    assert len(rec.tasks) == (3 if pipe._core.split_backward else 2) * pp * vpp * m
    gaps = sorted(rec.dispatch_gaps_us)
    assert all(g >= 0 for g in gaps) and len(gaps) < len(rec.tasks)
    if gaps:  # the median the record reports is the list's (of an even count, the middle two's)
        n = len(gaps)
        want = gaps[n // 2] if n % 2 else (gaps[n // 2 - 1] + gaps[n // 2]) / 2
        assert rec.dispatch_gap_us == pytest.approx(want, abs=1e-3)


def pyramid(sizes):
    """The entry order the adaptive rule promises (docs/frontier.md): sizes ascending, groups of
    equal size alternately at the front and the back, so small ones come first and last."""
    groups = sorted({s: [i for i, t in enumerate(sizes) if t == s] for s in sizes}.items())
    front = [i for k, (_, g) in enumerate(groups) if k % 2 == 0 for i in g]
    # The back half reads largest group first, each group still in microbatch order.
    back_groups = [g for k, (_, g) in enumerate(groups) if k % 2 == 1][::-1]
    return front + [i for g in back_groups for i in g]


class FromDict(torch.nn.Module):
    """A first chunk that takes its microbatch as a dict."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, d):
        return self.inner(d["ids"])


@pytest.mark.parametrize("given", ["tensor", "dict"])
def test_adaptive_lets_microbatches_enter_by_size(given):
    # A dict's size is its tensors' (it counted as 0, keeping microbatch order).
    m = 6
    chunks = lm.chunks(2)
    if given == "dict":
        chunks[0] = FromDict(chunks[0])
    pipe = rrfp.Pipeline(chunks, lm.loss_fn, pp=2, microbatches=m, hint="adaptive",
                         split_backward="on")
    xs, ys = lm.batches(m, seed=3)
    sizes = [x.numel() for x in xs]
    assert len(set(sizes)) > 2, sizes
    pipe.step(xs if given == "tensor" else [{"ids": x, "n": 1} for x in xs], ys)
    order = [t for st, t, *_ in sorted(pipe.last_step.tasks, key=lambda t: t[2])
             if st == 0 and t.startswith("F")]
    want = [f"F c0 m{mb}" for mb in pyramid(sizes)]
    assert want != [f"F c0 m{mb}" for mb in range(m)], "a weak case: the sizes keep mb order"
    assert order == want, (sizes, order)


def test_one_batch_is_split_into_microbatches():
    chunks = lm.chunks(2)
    pipe = rrfp.Pipeline(chunks, lm.loss_fn, pp=2, microbatches=4)
    x = torch.randint(0, 64, (8, 12))
    loss = pipe.step(x, x)
    ref = lm.chunks(2)
    want = lm.reference_step(ref, list(x.tensor_split(4)), list(x.tensor_split(4)))
    assert torch.equal(loss, want)


def test_gradients_are_added_in_microbatch_order_when_backward_runs_in_reverse(tmp_path):
    # A hint file that runs every backward in reverse microbatch order: the parameter
    # gradients must still be added 0, 1, 2, 3, as the plain loop adds them.
    hint = tmp_path / "reverse.txt"
    hint.write_text("rrfp-hint 1 pp=2 vpp=1 microbatches=4 placement=loop split=0\n"
                    "stage 0: F0:0 F0:1 F0:2 F0:3 B0:3 B0:2 B0:1 B0:0\n"
                    "stage 1: F1:0 F1:1 F1:2 F1:3 B1:3 B1:2 B1:1 B1:0\n")
    ref_chunks, ref_losses = run_reference(2, 2, 4)
    chunks = lm.chunks(2)
    pipe = rrfp.Pipeline(chunks, lm.loss_fn, pp=2, microbatches=4, hint=str(hint),
                         policy="fixed")
    opt = torch.optim.SGD([p for c in chunks for p in c.parameters()], lr=0.05)
    for s in range(2):
        xs, ys = lm.batches(4, seed=s)
        opt.zero_grad()
        assert torch.equal(pipe.step(xs, ys), ref_losses[s])
        opt.step()
    order = [t for st, t, *_ in sorted(pipe.last_step.tasks, key=lambda t: t[2]) if st == 1]
    assert order[4:] == ["B c1 m3", "B c1 m2", "B c1 m1", "B c1 m0"], order
    for a, b in zip(ref_chunks, chunks):
        for p, q in zip(a.parameters(), b.parameters()):
            assert torch.equal(p, q)


def test_a_hint_file_that_deadlocks_the_blocking_rendezvous_is_refused(tmp_path):
    # Stage 1 lists F m1 first: its one posted receive is m1's, while stage 0 sends m0 first.
    # The step stalled until the watchdog; under async the order runs.
    hint = tmp_path / "swap.txt"
    hint.write_text("rrfp-hint 1 pp=2 vpp=1 microbatches=2 placement=loop split=0\n"
                    "stage 0: F0:0 F0:1 B0:0 B0:1\n"
                    "stage 1: F1:1 F1:0 B1:0 B1:1\n")
    with pytest.raises(ValueError, match=r"^`hint` .*swap\.txt: its order deadlocks under "
                       r"`comm` blocking with `policy` fixed .*F c1 m1"):
        rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, microbatches=2, hint=str(hint),
                      policy="fixed", comm="blocking", timeout=5)
    pipe = rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, microbatches=2, hint=str(hint),
                         policy="fixed", comm="async", timeout=30)
    xs, ys = lm.batches(2)
    pipe.step(xs, ys)


def test_step_record_reports_and_the_simulator_tools(tmp_path):
    pipe = rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, microbatches=4, hint="bf")
    xs, ys = lm.batches(4)
    pipe.step(xs, ys)
    rec = pipe.last_step
    rec.save_trace(tmp_path / "t.json")
    rec.save_svg(tmp_path / "t.svg")
    assert (tmp_path / "t.json").read_text().lstrip().startswith(("{", "["))
    assert "<svg" in (tmp_path / "t.svg").read_text()
    assert "ready bf (async)" in rec.table()
    assert len(rec.stages) == 2 and all(s["busy"] > 0 for s in rec.stages)
    assert rec.peak_d[0] >= 1 and rec.lower_bound <= rec.makespan + 1e-9
    report = rec.to_dict()
    run = report["runs"][0]
    assert run["label"] == "ready bf (async)" and abs(run["makespan_ms"] - 1e3 * rec.makespan) < 0.01
    # The step's dispatch gaps, as rrfp run's JSON gives them (to_dict had none). No seed drew
    # the work of a user's model: the header said seed=0.
    gaps = run["dispatch_gap_us"]  # stage 0 runs its ready forwards one after another
    assert gaps["dispatches"] == len(rec.dispatch_gaps_us) > 0
    assert gaps["median"] == pytest.approx(rec.dispatch_gap_us)
    assert gaps["p99"] == pytest.approx(sorted(rec.dispatch_gaps_us)[
        int(0.99 * (len(rec.dispatch_gaps_us) - 1) + 0.5)])  # by nearest rank
    assert report["seed"] is None and "seed=" not in rec.table()
    assert report["tp_protocol"] is None  # one rank a stage: no protocol ran ("leader" said one)
    # A file that cannot be written raises OSError, as Python's own writes do (ValueError for a
    # missing folder, RuntimeError for a full disk, before).
    with pytest.raises(OSError, match="t.svg. cannot be written: No such file or directory"):
        rec.save_svg(tmp_path / "missing-dir" / "t.svg")
    if os.path.exists("/dev/full"):
        with pytest.raises(OSError, match="No space left on device"):
            rec.save_trace("/dev/full")
    sim = rrfp.simulate(pp=4, microbatches=8, workload="uniform", hint="1f1b", policy="fixed")
    assert sim.makespan > 0 and sim.peak_d == [4, 3, 2, 1]  # 1F1B's warm-up depths
    order = rrfp.schedule(hint="1f1b", pp=2, microbatches=3)
    assert order[1] == [("F", 1, 0), ("B", 1, 0), ("F", 1, 1), ("B", 1, 1), ("F", 1, 2), ("B", 1, 2)]
    assert "bfw" in rrfp.hint_names()
    with pytest.raises(ValueError, match="unknown hint"):
        rrfp.simulate(hint="nope")


class Remap(torch.nn.Module):
    """Token ids in, token ids out, through a learnable table: an integer output carries no
    gradient, so the table gets none, in a plain loop as in the pipeline."""

    def __init__(self, vocab=64):
        super().__init__()
        self.table = torch.nn.Parameter(torch.arange(vocab, dtype=torch.float32).flip(0))

    def forward(self, ids):
        return self.table[ids].long()


@pytest.mark.parametrize("split", ["off", "on"])
def test_a_chunk_passing_integer_ids_on_trains_like_a_plain_loop(split):
    # Chunk 0 hands integer ids to chunk 1 (the embedding): no gradient flows back into it,
    # where its backward failed on the missing gradient ("'NoneType' object has no
    # attribute 'to'").
    def build():
        return [Remap()] + lm.chunks(3)
    ref, chunks = build(), build()
    xs, ys = lm.batches(4, seed=2)
    want = lm.reference_step(ref, xs, ys)
    pipe = rrfp.Pipeline(chunks, lm.loss_fn, pp=4, microbatches=4, hint="bfw" if split == "on"
                         else "bf", split_backward=split, delay_fn=delays(5))
    assert torch.equal(pipe.step(xs, ys), want)
    assert chunks[0].table.grad is None and ref[0].table.grad is None
    for a, b in zip(ref[1:], chunks[1:]):
        for (n, p), q in zip(a.named_parameters(), b.parameters()):
            assert torch.equal(p.grad, q.grad), n


def test_a_step_without_targets_hands_loss_fn_none():
    # A last chunk that computes its own loss: loss_fn(output, None) returns it.
    xs, ys = lm.batches(4, seed=5)

    class WithLoss(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, pair):
            return lm.loss_fn(self.inner(pair[0]), pair[1])

    chunks = lm.chunks(2)
    chunks[0] = FromPair(chunks[0])
    chunks[1] = WithLoss(chunks[1])
    pipe = rrfp.Pipeline(chunks, lambda out, t: out if t is None else None, pp=2, microbatches=4)
    loss = pipe.step([(x, y) for x, y in zip(xs, ys)])
    ref = lm.chunks(2)
    assert torch.equal(loss, lm.reference_step(ref, xs, ys))
    for p, q in zip([p for c in ref for p in c.parameters()],
                    [p for c in chunks for p in c.parameters()]):
        assert torch.equal(p.grad, q.grad)


class FromPair(torch.nn.Module):
    """A first chunk given (ids, targets): it hands the targets on with its output."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, pair):
        return self.inner(pair[0]), pair[1]


@pytest.mark.parametrize("hint", ["1f1b", "bfw"])
def test_a_step_adds_into_the_grad_tensors_that_are_there(hint):
    # A plain loop's backward adds into an existing .grad in place; the step set a new tensor,
    # so a flat buffer whose views are the .grads (fused optimizers keep one) kept zeros.
    def build():
        torch.manual_seed(0)
        chunks = [nn.Linear(8, 8), nn.Linear(8, 4)]
        params = [p for c in chunks for p in c.parameters()]
        flat = torch.zeros(sum(p.numel() for p in params))
        at = 0
        for p in params:
            p.grad = flat[at:at + p.numel()].view_as(p)
            at += p.numel()
        return chunks, params, flat

    def loss(out, y):
        return ((out - y) ** 2).sum()

    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 8, generator=g), torch.randn(8, 4, generator=g)
    ref, _, ref_flat = build()
    for _ in range(2):  # the second step adds to the first's
        for xi, yi in zip(x.tensor_split(2), y.tensor_split(2)):
            loss(ref[1](ref[0](xi)), yi).backward()
    chunks, params, flat = build()
    held = [p.grad for p in params]
    pipe = rrfp.Pipeline(chunks, loss, pp=2, microbatches=2, hint=hint,
                         split_backward="on" if hint == "bfw" else "off")
    for _ in range(2):
        pipe.step(x, y)
    assert all(p.grad is h for p, h in zip(params, held))
    assert torch.equal(flat, ref_flat)
    assert flat.abs().sum() > 0


def test_a_first_gradient_takes_the_parameters_strides():
    # A convolution fed channels-last inputs: autograd's weight gradient is channels-last, which
    # a plain loop's first accumulation copies into the parameter's strides. The step kept it
    # channels-last: .view(-1) failed and a per-parameter norm (LARS) came out in other bits.
    def build():
        torch.manual_seed(0)
        return [nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU()),
                nn.Sequential(nn.Conv2d(16, 8, 3), nn.Flatten(), nn.Linear(8 * 4 * 4, 4))]

    def loss(out, y):
        return ((out - y) ** 2).sum()

    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(2, 3, 8, 8, generator=g).contiguous(memory_format=torch.channels_last)
          for _ in range(4)]
    ys = [torch.randn(2, 4, generator=g) for _ in range(4)]
    ref, chunks = build(), build()
    for x, y in zip(xs, ys):
        loss(ref[1](ref[0](x)), y).backward()
    rrfp.Pipeline(chunks, loss, pp=2, microbatches=4).step(xs, ys)
    for a, b in zip(ref, chunks):
        for (n, p), q in zip(a.named_parameters(), b.parameters()):
            assert q.grad.stride() == p.grad.stride(), (n, q.grad.stride(), p.grad.stride())
            assert torch.equal(q.grad, p.grad) and torch.equal(q.grad.norm(), p.grad.norm()), n


def test_a_first_gradient_of_a_parameter_with_gaps_is_contiguous():
    # Autograd stores a gradient of a parameter that is not dense contiguous; empty_like kept
    # its channels-last order ((48, 1, 12, 3) where autograd gives (48, 16, 4, 1)).
    def build():
        torch.manual_seed(0)
        lin = nn.Linear(4, 4)
        sparse_weight = torch.randn(2, 3, 4, 8).contiguous(memory_format=torch.channels_last)
        lin.extra = nn.Parameter(sparse_weight[..., ::2])
        return lin

    class UsesExtra(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = build()

        def forward(self, x):
            return self.inner(x) + self.inner.extra.sum()

    def loss(out, y):
        return ((out - y) ** 2).sum()

    ref, mine = UsesExtra(), UsesExtra()
    x, y = torch.randn(4, 4), torch.randn(4, 4)
    for xm, ym in zip(x.chunk(2), y.chunk(2)):
        loss(ref(xm), ym).backward()
    rrfp.Pipeline([mine], loss, pp=1, microbatches=2).step(x, y)
    a, b = ref.inner.extra.grad, mine.inner.extra.grad
    assert b.stride() == a.stride() and torch.equal(a, b), (a.stride(), b.stride())


def test_the_chunks_are_a_read_only_view_of_the_modules_that_run():
    # A module put in pipe.chunks trained nothing (the steps ran the one built with), while
    # state_dict() and save() took its weights; a chunk deleted there left the checkpoint.
    chunks = [nn.Linear(4, 4), nn.Linear(4, 2)]
    pipe = rrfp.Pipeline(chunks, lambda a, b: torch.nn.functional.mse_loss(a, b), pp=2,
                         microbatches=2)
    assert pipe.chunks[0] is chunks[0] and sorted(pipe.chunks) == [0, 1]
    with pytest.raises(TypeError):
        pipe.chunks[0] = nn.Linear(4, 4)
    with pytest.raises(TypeError):
        del pipe.chunks[1]
    with pytest.raises(AttributeError):
        pipe.chunks = {}
    pipe.step(torch.randn(8, 4), torch.randn(8, 2))
    assert chunks[0].weight.grad is not None
    assert set(pipe.state_dict()) == {"0.weight", "0.bias", "1.weight", "1.bias"}
