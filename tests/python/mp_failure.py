"""A step that fails on one process fails on every process of the job, and training goes on
after it as a plain loop that skips a bad batch would; run by multiprocess_pipeline.py under
mpirun and torchrun. In step 1 the last stage's forward raises: its pipeline's other processes
hear of it at once (they used to wait out their timeout and raise TimeoutError). In step 2
stage 0's last backward raises, after the other stages have done their whole part of the step:
they drop the step too (they used to keep it, and the processes then held different weights).
Only the last replica fails; the other replicas (replica 0, whose rank 0 merges the records,
among them) drop both steps as well. Then a step whose set-up fails on one process
(set_up_failure), and, with dp > 1, replicas whose buffers came out of the step apart
(buffers_apart), are refused on every process at once, no .grad changed."""
import os
import sys
import tempfile
import time

import torch

import lm
import rrfp

BAD_FORWARD, BAD_BACKWARD, STEPS = 1, 2, 4


class Failing(torch.nn.Module):
    """`inner`, whose forward raises in step BAD_FORWARD (last=True), or whose last
    microbatch's backward raises in step BAD_BACKWARD (last=False), when `armed`;
    `clock["step"]` is the step running. Every replica wraps its chunks alike (they must build
    the same chunks); only the last replica's are armed."""

    def __init__(self, inner, last, m, clock, armed):
        super().__init__()
        self.inner, self.last, self.m, self.clock, self.armed = inner, last, m, clock, armed
        self.at, self.calls = -1, 0  # the forwards of this step so far

    def forward(self, x):
        step = self.clock["step"] if self.armed else -1
        if step != self.at:
            self.at, self.calls = step, 0
        self.calls += 1
        if self.last and step == BAD_FORWARD:
            raise ValueError("a bad batch")
        out = self.inner(x)
        if not self.last and step == BAD_BACKWARD and self.calls == self.m:
            def fail(grad):
                raise ValueError("a bad gradient")
            out.register_hook(fail)
        return out


def run(pp, dp, m, transport, rank):
    clock = {"step": 0}
    failing_replica = rank // pp == dp - 1

    def build(i):
        c = lm.chunks(pp)[i]  # pp >= 2: the first and last chunks are on other processes
        return Failing(c, i == pp - 1, m, clock, failing_replica) if i in (0, pp - 1) else c

    pipe = rrfp.Pipeline(build, lm.loss_fn, pp=pp, microbatches=m, hint="1f1b", policy="fixed",
                         transport=transport, dp=dp, timeout=60)
    ref_chunks, ref_losses = lm.run_reference(pp, STEPS, m, replicas=dp,
                                              skip=(BAD_FORWARD, BAD_BACKWARD))
    params = [p for c in pipe.chunks.values() for p in c.parameters()]
    opt = torch.optim.SGD(params, lr=0.05)
    for s in range(STEPS):
        clock["step"] = s
        xs, ys = lm.batches(m, seed=s if dp == 1 else s * 100 + pipe.replica)
        opt.zero_grad(set_to_none=True)
        try:
            loss = pipe.step(xs, ys)
        except rrfp.StageError as e:
            assert s in (BAD_FORWARD, BAD_BACKWARD), (rank, s, str(e))
            said = str(e)
            # Its own task's error, a peer's told at once, or the closing exchange's.
            assert (f"failed step {s}: " in said or f"step {s} failed on job rank" in said
                    or "a bad batch" in said or "a bad gradient" in said), (rank, s, said)
            if f"failed step {s}: " in said:  # told by the failing process, named by job rank
                failing = (dp - 1) * pp + (pp - 1 if s == BAD_FORWARD else 0)
                assert f" rank {failing}) failed step {s}: " in said, (rank, s, said)
            assert all(p.grad is None for p in params), (rank, s, "a failed step left a .grad")
            continue
        assert s not in (BAD_FORWARD, BAD_BACKWARD), (rank, s, "a failed step went on here")
        if pipe.replica == 0:
            assert torch.equal(loss, ref_losses[s]), (rank, s, loss, ref_losses[s])
        opt.step()
    refusals(pipe, rank, pp * dp, m)
    set_up_failure(pp, dp, m, transport, rank)
    penalty_over_the_whole_model(pp, dp, m, transport, rank)
    if dp > 1:
        buffers_apart(pp, dp, transport, rank)
    for c, module in pipe.chunks.items():
        inner = module.inner if isinstance(module, Failing) else module
        for (pn, p), q in zip(ref_chunks[c].named_parameters(), inner.parameters()):
            assert torch.equal(p, q), f"rank {rank} chunk {c} {pn} differs"
    print(f"rank {rank}: steps failed on one process were dropped on all, training went on "
          "bitwise", flush=True)


def refusals(pipe, rank, world, m):
    """A batch refused on one process alone, and a call that differs between processes (step()
    beside eval_step(), save() or load()), raise on every process at once (the others used to
    wait out the timeout in the step's collectives, and a step paired with another process's
    eval_step() left stage 0 without gradients, silently); the job then goes on."""
    xs, ys = lm.batches(m, seed=99)
    params = [p for c in pipe.chunks.values() for p in c.parameters()]
    saved = [p.grad for p in params]
    for p in params:
        p.grad = None
    last = rank == world - 1
    start = time.monotonic()
    try:
        pipe.step(xs[:-1] if last else xs, ys)  # m - 1 microbatches: refused there alone
        raise AssertionError(f"rank {rank}: a batch refused on job rank {world - 1} went on")
    except ValueError as e:
        assert last and f"expected {m} microbatches, got {m - 1}" in str(e), (rank, str(e))
    except RuntimeError as e:
        assert not last and f"job rank(s) [{world - 1}] refused the batch" in str(e), (rank, e)
    folder = tempfile.mkdtemp()  # this process's own: rank 0's save and load stop before it
    for call, other in (("eval_step()", lambda: pipe.eval_step(xs, ys)),
                        ("save()", lambda: pipe.save(folder)),
                        ("load()", lambda: pipe.load(os.path.join(folder, "none")))):
        try:
            other() if rank == 0 else pipe.step(xs, ys)
            raise AssertionError(f"rank {rank}: step() went on beside {call}")
        except RuntimeError as e:
            assert f"not making the same call (job rank 0 in {call} after" in str(e), (rank, e)
            # load() found no checkpoint there, told with the difference
            assert (rank == 0 and call == "load()") == isinstance(e.__cause__,
                                                                  FileNotFoundError), (rank, e)
    os.rmdir(folder)
    pipe.eval_step(xs, ys)  # every process in step again, then clip_grad_norm_'s refusals
    for args, own, others in (((1.0 + rank,), ValueError, ValueError),
                              ((("x" if rank == 1 else 1.0),), TypeError, RuntimeError)):
        try:
            pipe.clip_grad_norm_(*args)
            raise AssertionError(f"rank {rank}: clip_grad_norm_{args} went on")
        except (TypeError, ValueError, RuntimeError) as e:
            want = own if rank == 1 or others is ValueError else others
            assert type(e) is want, (rank, args, e)
            assert args[0] != "x" or rank == 1 or "process(es) [1] refused" in str(e), (rank, e)
    assert time.monotonic() - start < 20, (rank, "a refusal waited for the timeout")
    assert all(p.grad is None for p in params), (rank, "a refused step left a .grad")
    pipe.eval_step(xs, ys)  # every process in step again
    for p, g in zip(params, saved):
        p.grad = g


def _grads(pipe):
    return [None if p.grad is None else p.grad.clone()
            for c in sorted(pipe.chunks) for p in pipe.chunks[c].parameters()]


def _same(a, b):
    return len(a) == len(b) and all(
        (x is None and y is None) or (x is not None and y is not None and torch.equal(x, y))
        for x, y in zip(a, b))


def set_up_failure(pp, dp, m, transport, rank):
    """A step whose set-up fails on one process alone (here the last job rank's GradSums, the
    copy of each .grad a step starts from, runs out of memory) is refused on every process at
    once: that process raises its own MemoryError, the others RuntimeError naming its job rank,
    and no .grad changes anywhere (gradient accumulation: each .grad holds the step before).
    Before, the failure came before the step's first gather: the others waited in it until
    their timeout. The job then steps on alike."""
    world = pp * dp
    pipe = rrfp.Pipeline(lambda i: lm.chunks(pp)[i], lm.loss_fn, pp=pp, microbatches=m,
                         transport=transport, dp=dp, timeout=10)
    xs, ys = lm.batches(m, seed=pipe.replica)
    pipe.step(xs, ys)  # every .grad set: the next step accumulates into it
    before = _grads(pipe)
    module = sys.modules["rrfp._step"]  # where a step's set-up makes its GradSums
    real = module.GradSums

    def out_of_memory(*args, **kwargs):
        raise MemoryError("set-up ran out of memory (a test's)")

    if rank == world - 1:
        module.GradSums = out_of_memory
    start = time.monotonic()
    try:
        pipe.step(xs, ys)
        raise AssertionError(f"rank {rank}: a step whose set-up failed on job rank "
                             f"{world - 1} went on")
    except MemoryError as e:
        assert rank == world - 1 and "a test's" in str(e), (rank, str(e))
    except RuntimeError as e:
        assert rank != world - 1 and f"job rank(s) [{world - 1}]" in str(e), (rank, str(e))
    finally:
        module.GradSums = real
    assert time.monotonic() - start < 5, (rank, "a set-up failure waited for the timeout")
    assert _same(_grads(pipe), before), (rank, "a refused step changed a .grad")
    pipe.step(xs, ys)  # the job steps on alike
    assert not _same(_grads(pipe), before), (rank, "the step after added nothing")
    print(f"rank {rank}: a set-up failure on one process refused on every process", flush=True)


def penalty_over_the_whole_model(pp, dp, m, transport, rank):
    """An L2 penalty over the whole model inside loss_fn, with chunk_fn: every process builds
    the whole model and returns its piece, so the last stage's loss_fn reaches this process's
    copies of the other chunks' parameters, chunks it does not run. Refused on every process,
    no .grad written anywhere, as with a list of chunks; before, each copy was taken for a leaf
    the forward made and its gradient went to the copy's .grad, which nothing reads: the chunks
    that train them never got it, silently."""
    model = lm.chunks(pp)
    params = [p for c in model for p in c.parameters()]

    def penalised(y, t):
        return lm.loss_fn(y, t) + 1e-2 * sum((p ** 2).sum() for p in params)

    pipe = rrfp.Pipeline(lambda i: model[i], penalised, pp=pp, microbatches=m,
                         transport=transport, dp=dp, timeout=30)
    try:
        pipe.step(*lm.batches(m, seed=pipe.replica))
        raise AssertionError(f"rank {rank}: a penalty over other processes' chunks went on")
    except rrfp.StageError as e:
        if rank % pp == pp - 1:  # the stage that raised says what it found
            assert f"chunk {pp - 1} (with loss_fn) uses " in str(e) and "parameters of no " \
                "chunk of this process (other processes' copies" in str(e), (rank, str(e))
    assert all(p.grad is None for p in params), (rank, "a refused step left a .grad")
    print(f"rank {rank}: a penalty over other processes' chunks refused", flush=True)


class _Cache(torch.nn.Module):
    """A linear map over each position plus a buffer as long as the longest sequence seen, as
    a rotary embedding's cache grows (`grows`), or of a fixed length."""

    def __init__(self, grows):
        super().__init__()
        self.lin, self.grows = torch.nn.Linear(1, 1), grows
        self.register_buffer("cache", torch.arange(4, dtype=torch.float32), persistent=False)

    def forward(self, x):  # x: (rows, length)
        out = self.lin(x.unsqueeze(-1)).squeeze(-1)
        if not self.grows:
            return out + self.cache.sum()
        if x.shape[1] > self.cache.numel():
            self.cache = torch.arange(x.shape[1], dtype=torch.float32)
        return out + self.cache[:x.shape[1]]


def buffers_apart(pp, dp, transport, rank):
    """Replica 0's buffers are copied into the other replicas after every step; a buffer the
    step left in another shape in some replica (the last chunk's cache, grown by that
    replica's longer sequences) cannot be. Refused on every process of the job, whatever its
    replica or stage, before any .grad is written or any buffer copied, the same ValueError
    naming the chunk, the buffer and both shapes, in step() and eval_step() alike. Before, only
    the other replica's process of that chunk's stage raised, after its .grad was written, while
    replica 0's returned: the replicas trained apart, silently. With the same lengths everywhere
    the job then steps on, every replica holding replica 0's buffers."""
    torch.manual_seed(0)
    pipe = rrfp.Pipeline(lambda i: _Cache(i == pp - 1), lambda o, t: o.sum(), pp=pp,
                         microbatches=2, transport=transport, dp=dp, timeout=10)
    x = torch.ones(4, 4)
    pipe.step(x)  # every .grad set, every cache of length 4
    before = _grads(pipe)
    longer = torch.ones(4, 6 if pipe.replica == 1 else 4)
    words = [f"chunk {pp - 1}'s buffer 'cache' is torch.float32 (6,) in replica 1 but "
             "torch.float32 (4,) in replica 0", "before any .grad was written"]
    start = time.monotonic()
    for call, name in ((pipe.step, "step()"), (lambda b: pipe.eval_step(b), "eval_step()")):
        try:
            call(longer)
            raise AssertionError(f"rank {rank}: {name} went on with buffers apart")
        except ValueError as e:
            assert f"dp: after {name}, " in str(e) and all(w in str(e) for w in words), \
                (rank, str(e))
    assert time.monotonic() - start < 5, (rank, "a refusal waited for the timeout")
    assert _same(_grads(pipe), before), (rank, "a refused step changed a .grad")
    mine = pipe.chunks[rank % pp].cache
    assert mine.numel() == (6 if pipe.replica == 1 and rank % pp == pp - 1 else 4), \
        (rank, "a refused step copied a buffer")
    pipe.chunks[rank % pp].cache = torch.arange(4, dtype=torch.float32) * (1 + pipe.replica)
    pipe.step(x)  # the job steps on, and every replica takes replica 0's buffers
    assert torch.equal(pipe.chunks[rank % pp].cache, torch.arange(4, dtype=torch.float32)), \
        (rank, pipe.chunks[rank % pp].cache)
    print(f"rank {rank}: replicas' buffers apart refused on every process", flush=True)
