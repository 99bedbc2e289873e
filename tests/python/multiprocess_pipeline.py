"""rrfp.Pipeline with a process per stage: under mpirun (--transport mpi, and --dp 2: two
replicas) or torchrun (--transport c10d, Gloo). Every process builds only its own chunks and
ends bitwise where the plain loop ends (its chunks' parameters, and the losses on the last
stage). P = the number of processes / dp.
    tests/mpirun.sh 4 python3 tests/python/multiprocess_pipeline.py --transport mpi --dp 2
    python3 -m torch.distributed.run --nproc_per_node 4 --redirects 1 --tee 1 \
        tests/python/multiprocess_pipeline.py --transport c10d
"""
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conftest  # noqa: F401,E402  (the package path)
import torch  # noqa: E402

import lm  # noqa: E402
import rrfp  # noqa: E402

def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def job_rank():
    """This process's rank in the job, from the launcher (before any pipeline is built)."""
    return int(os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))


def refused(call, what, words, errors=ValueError):
    """Runs call(), which must raise one of `errors` whose message holds every one of `words`;
    `what` names what would have been accepted otherwise."""
    try:
        call()
    except errors as e:
        assert all(w in str(e) for w in words), e
    else:
        raise AssertionError(f"{what} was accepted")


def dp_step(build):
    """One step of a data-parallel pipeline over build(i)'s chunks, each replica on its own
    batch; returns the pipeline."""
    pipe = rrfp.Pipeline(build, lm.loss_fn, pp=pp, microbatches=m, transport=transport, dp=dp,
                         timeout=60)
    pipe.step(*lm.batches(m, seed=pipe.replica))
    return pipe


transport = arg("--transport", "mpi")
dp = int(arg("--dp", 1))
world = int(os.environ.get("OMPI_COMM_WORLD_SIZE") or os.environ.get("WORLD_SIZE") or 0)
if world < 2 or world % dp:
    sys.exit(f"run under mpirun or torchrun with a multiple of dp={dp} processes (got {world})")
CASES = [("fixed 1f1b", "1f1b", "fixed", "off", 1), ("ready bf", "bf", "ready", "off", 1),
         ("ready bfw split", "bfw", "ready", "on", 1), ("ready bf V=2", "bf", "ready", "off", 2),
         ("ready bf V=2 clipped", "bf", "ready", "off", 2)]
pp, m, steps = world // dp, 4, 3
for name, hint, policy, split, vpp in CASES:
    n = pp * vpp
    # Clipped: by the whole model's gradient norm, which no process holds alone.
    clip = 0.5 if "clipped" in name else None
    ref_chunks, ref_losses = lm.run_reference(n, steps, m, replicas=dp, clip=clip)

    def delay(stage, kind, chunk, mb, name=name):
        r = random.Random(f"{name}-{stage}-{kind}-{chunk}-{mb}")
        return r.random() * 0.004 if r.random() < 0.3 else 0.0

    pipe = rrfp.Pipeline(lambda i: lm.chunks(n)[i], lm.loss_fn, pp=pp, vpp=vpp, microbatches=m,
                         hint=hint, policy=policy, split_backward=split, transport=transport, dp=dp,
                         timeout=60, delay_fn=delay)
    opt = torch.optim.SGD([p for c in pipe.chunks.values() for p in c.parameters()], lr=0.05)
    for s in range(steps):
        xs, ys = lm.batches(m, seed=s if dp == 1 else s * 100 + pipe.replica)
        opt.zero_grad()
        loss = pipe.step(xs, ys)
        assert loss is not None, f"{name}: rank {pipe.rank} got no loss"  # every rank gets it
        if pipe.replica == 0:
            assert torch.equal(loss, ref_losses[s]), f"{name} step {s}: {loss} != {ref_losses[s]}"
        if clip is not None:
            norm = pipe.clip_grad_norm_(clip)
            assert float(norm) > clip, f"{name}: a weak case, nothing clipped ({float(norm)})"
        opt.step()
    for c, module in pipe.chunks.items():
        for (pn, p), q in zip(ref_chunks[c].named_parameters(), module.parameters()):
            assert torch.equal(p, q), f"{name}: rank {pipe.rank} chunk {c} {pn} differs"
    rec = pipe.last_step  # the whole step of replica 0, on every process
    assert len(rec.tasks) == (3 if split == "on" else 2) * n * m, (pipe.rank, len(rec.tasks))
    assert len({(t[0], t[1]) for t in rec.tasks}) == len(rec.tasks), "a task twice"
    print(f"rank {pipe.rank} (stages {pipe.stages}, replica {pipe.replica}, {transport}): {name} "
          "bitwise equal", flush=True)

# A parameter no replica's loss reaches keeps no gradient, as in a plain loop over every
# replica's microbatches (the replicas' sum used to hand it zeros, which an optimizer applies).
if dp > 1:
    class WithUnused(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner, self.unused = inner, torch.nn.Linear(2, 2)

        def forward(self, x):
            return self.inner(x)

    def with_unused(i):
        return WithUnused(lm.chunks(pp)[i])

    pipe = dp_step(with_unused)
    for c, module in pipe.chunks.items():
        assert module.unused.weight.grad is None, f"rank {pipe.rank}: an unused gradient"
        assert all(p.grad is not None for n, p in module.named_parameters()
                   if not n.startswith("unused")), f"rank {pipe.rank}: a used one missing"
    print(f"rank {pipe.rank}: a parameter no replica used keeps no gradient", flush=True)

    # A sparse gradient (the token embedding with sparse=True) is summed over the replicas as
    # the dense one is, and comes back dense (it failed on its own process while the others
    # waited).
    # The sparse one's own sums round otherwise than the dense backward's: close, not bitwise.
    def sparse_embedding(i):
        c = lm.chunks(pp)[i]
        if i == 0:
            c[0].tok.sparse = True
        return c

    grads = []
    for build in (lambda i: lm.chunks(pp)[i], sparse_embedding):
        pipe = dp_step(build)
        grads.append([p.grad for c in pipe.chunks.values() for p in c.parameters()])
    assert all(not b.is_sparse and torch.allclose(a, b, rtol=1e-5, atol=1e-6)
               for a, b in zip(*grads)), f"rank {pipe.rank}: the sparse sum differs"
    print(f"rank {pipe.rank}: a sparse gradient summed over the replicas", flush=True)

    # Replicas that train other parameters of the same sizes (one froze each block's first
    # LayerNorm, the other each block's second) are refused on every process, where their
    # gradients were summed into each other's parameters.
    def frozen_by_replica(i):
        c = lm.chunks(pp)[i]
        for block in c:
            if hasattr(block, "ln1"):
                (block.ln1 if job_rank() // pp == 0 else block.ln2).weight.requires_grad_(False)
        return c

    refused(lambda: dp_step(frozen_by_replica), "replicas training different parameters",
            ["the replicas train different parameters"])
    print(f"rank {job_rank()}: replicas training different parameters refused", flush=True)

    # ... and replicas that train different numbers of values on one stage alone (replica 1
    # froze the last chunk's attention): every process refuses the step before it runs, the
    # other stages too (they used to go on and wait for the last stage's processes).
    def frozen_attention(i):
        c = lm.chunks(pp)[i]
        if job_rank() // pp == 1 and i == pp - 1:
            for block in c:
                if hasattr(block, "qkv"):
                    block.qkv.requires_grad_(False)
        return c

    refused(lambda: dp_step(frozen_attention), "replicas training different sizes",
            [f"the replicas train different parameters on stage {pp - 1}", "replica 1"])

    # ... and a parameter replaced, after the pipeline was built, by one of another shape in one
    # replica (that broadcasts alike): the replicas' sum failed on that stage's processes
    # alone, the others' step went on with its gradients set. Refused on every process before
    # the step runs.
    rpipe = rrfp.Pipeline(lambda i: lm.chunks(pp)[i], lm.loss_fn, pp=pp, microbatches=m,
                          transport=transport, dp=dp, timeout=60)
    if rpipe.replica == 1 and 0 in rpipe.chunks:
        block = next(b for b in rpipe.chunks[0] if hasattr(b, "proj"))
        block.proj.bias = torch.nn.Parameter(torch.zeros(1))
    refused(lambda: rpipe.step(*lm.batches(m, seed=rpipe.replica)),
            "replicas training other shapes",
            ["the replicas train different parameters on stage 0", "replica 1", "shapes"])
    assert all(p.grad is None for c in rpipe.chunks.values() for p in c.parameters())
    print(f"rank {job_rank()}: replicas training parameters of other shapes refused", flush=True)

    # Gradients of another dtype than float32 (a bfloat16 or float64 model) are summed in
    # their own dtype, the replicas' sums added in replica order; they failed as not float32.
    for dtype in (torch.bfloat16, torch.float64):
        def typed(i, dtype=dtype):
            return lm.chunks(pp)[i].to(dtype)

        pipe = dp_step(typed)
        want = None
        for r in range(dp):
            ref = [typed(i) for i in range(pp)]
            xs, ys = lm.batches(m, seed=r)
            lm.reference_step(ref, xs, ys)
            got = [[p.grad for p in c.parameters()] for c in ref]
            want = got if want is None else [[a + b for a, b in zip(w, g)]
                                             for w, g in zip(want, got)]
        for c, module in pipe.chunks.items():
            assert all(p.grad.dtype == dtype and torch.equal(p.grad, w)
                       for p, w in zip(module.parameters(), want[c])), (pipe.rank, c, dtype)
    print(f"rank {job_rank()}: bfloat16 and float64 gradients summed over the replicas, bitwise",
          flush=True)

    # A stage that trains nothing still joins its replicas' sum (with nothing to add), as the
    # other stages' replicas do theirs.
    def last_frozen(i):
        c = lm.chunks(pp)[i]
        if i == pp - 1:
            c.requires_grad_(False)
        return c

    pipe = dp_step(last_frozen)
    grads = [p.grad for c in pipe.chunks.values() for p in c.parameters()]
    assert all(g is None for g in grads) if pipe.stages == [pp - 1] else \
        all(g is not None for g in grads), f"rank {pipe.rank}: {[g is None for g in grads]}"
    print(f"rank {pipe.rank}: a stage that trains nothing joins the replicas' sum", flush=True)

# A parameter that chunks on two stages share (tied embeddings across processes): each process
# keeps a copy, and every copy gets the same gradient (mp_tied.py says which).
if pp > 1:
    import mp_tied  # noqa: E402

    mp_tied.run(pp, dp, m, transport)
    if pp >= 3:
        mp_tied.run_three(pp, transport, dp)
    mp_tied.run_shared_buffer(pp, transport, dp)
    mp_tied.run_held_tensor(pp, transport, dp)

# Loss scaling: a step whose gradients overflow on one stage alone is skipped by every stage.
import mp_scaler  # noqa: E402

mp_scaler.run(pp, dp, m, transport)

# The caller's own dist.send / dist.recv on the default group, between steps (torchrun).
import mp_user_p2p  # noqa: E402

mp_user_p2p.run(pp, dp, m, transport)

# A chunk refused where it is built (a lazy parameter, in the last stage's process alone) is
# told to every process, which raises too, where the others waited in the next collective.
def lazy_last(i):
    c = lm.chunks(pp)[i]
    if i == pp - 1:
        c.append(torch.nn.LazyLinear(4))
    return c


# The process of the last stage names the parameter; the others, the processes that failed.
words = ["has a parameter not initialized yet"] if job_rank() % pp == pp - 1 else \
    ["could not build their chunks"]
refused(lambda: rrfp.Pipeline(lazy_last, lm.loss_fn, pp=pp, transport=transport, dp=dp,
                              timeout=60),
        "a lazy chunk", words, (ValueError, RuntimeError))
print(f"rank {job_rank()}: a chunk refused on one process, every process told", flush=True)

# Launch detection: with no transport= the pipeline takes the launcher's (mpirun: mpi,
# torchrun: c10d) and runs the same step; a process count that is not pp * dp is refused before
# any process waits on another.
# Its loss_fn gives shape (1,), which the loss keeps on every process (the others got shape ()).
auto = rrfp.Pipeline(lambda i: lm.chunks(pp)[i], lambda y, t: lm.loss_fn(y, t).reshape(1),
                     pp=pp, microbatches=m, dp=dp, timeout=60)
assert auto.stages == [auto.rank % pp], (auto.rank, auto.stages)
ref_chunks, ref_losses = lm.run_reference(pp, 1, m, replicas=dp)
xs, ys = lm.batches(m, seed=0 if dp == 1 else auto.replica)
loss = auto.step(xs, ys)
assert loss.shape == (1,), f"rank {auto.rank}: a loss of shape {tuple(loss.shape)}"
if auto.replica == 0:
    assert torch.equal(loss, ref_losses[0].reshape(1)), (loss, ref_losses[0])
refused(lambda: rrfp.Pipeline(lambda i: lm.chunks(2 * pp)[i], lm.loss_fn, pp=2 * pp, dp=dp,
                              microbatches=m),
        "a launcher with too few processes",
        [f"started {world} process(es), but pp={2 * pp} x dp={dp} needs {2 * pp * dp}"])
print(f"rank {auto.rank}: the launcher's transport detected, the loss on every rank", flush=True)

# Over MPI the processes share one world, whose communicators take one layout at a time: a
# second pipeline of another layout, while one is alive, re-split them under it (its next step
# read another stage's chunks: a segfault). Refused on every process; the first trains on.
if transport == "mpi" and world % (2 * pp) == 0 and 2 * pp <= world:
    refused(lambda: rrfp.Pipeline(lambda i: lm.chunks(2 * pp)[i], lm.loss_fn, pp=2 * pp,
                                  dp=world // (2 * pp), microbatches=m, transport="mpi"),
            "a second layout over MPI", ["alive over this MPI job"])
    loss = auto.step(*lm.batches(m, seed=0 if dp == 1 else auto.replica))
    if auto.replica == 0:
        assert torch.equal(loss, ref_losses[0].reshape(1)), (loss, ref_losses[0])
    print(f"rank {auto.rank}: a second layout over MPI refused, the first trains on", flush=True)

# A job whose default group is not Gloo (a GPU job's NCCL, pretended here: NCCL takes CUDA
# tensors alone, and the pipeline's messages are host bytes): the pipeline makes Gloo groups
# over the same ranks for itself, every process alike, and trains as over the Gloo default.
if transport == "c10d":
    import torch.distributed as dist  # noqa: E402

    made, real_backend, real_new = [], dist.get_backend, dist.new_group

    def made_group(*a, **k):
        made.append(k.get("backend"))
        return real_new(*a, **k)

    dist.get_backend = lambda g=None: "nccl" if g in (None, dist.group.WORLD) else real_backend(g)
    dist.new_group = made_group
    try:
        npipe = rrfp.Pipeline(lambda i: lm.chunks(pp)[i], lm.loss_fn, pp=pp, microbatches=m,
                              dp=dp, timeout=60)
        loss = npipe.step(*lm.batches(m, seed=0 if dp == 1 else npipe.replica))
    finally:
        dist.get_backend, dist.new_group = real_backend, real_new
    assert made and all(b == "gloo" for b in made), made
    if npipe.replica == 0:
        assert torch.equal(loss, ref_losses[0]), (loss, ref_losses[0])
    print(f"rank {npipe.rank}: a non-Gloo default group, {len(made)} Gloo group(s) made",
          flush=True)

# Processes of one replica that pass different batches (each process's generator seeded on its
# own, say) are told so on every process, before any task runs: the inputs would otherwise be
# trained against another batch's targets.
xs, ys = lm.batches(m, seed=1000 + auto.rank)
refused(lambda: auto.step(xs, ys), "different batches on the processes of a replica",
        ["passed different inputs and targets to step()"])
# Each microbatch a tuple: the tensors inside count, not only the tuple's type.
refused(lambda: auto.step([(x, {"n": 1}) for x in xs], lm.batches(m, seed=0)[1]),
        "different tuple batches on the processes of a replica",
        ["passed different inputs to step()"])
# Targets that hold no tensor, or hold values beside their tensors (NumPy labels, Python
# numbers), count too: the digest read only tensors, so each process's own labels trained silently.
ys0 = lm.batches(m, seed=0)[1]
refused(lambda: auto.step(lm.batches(m, seed=0)[0], [y.numpy() + job_rank() % pp for y in ys0]),
        "different NumPy targets on the processes of a replica", ["passed different targets"])
refused(lambda: auto.step(lm.batches(m, seed=0)[0], [(y, job_rank() % pp) for y in ys0]),
        "targets with a number that differs on the processes of a replica",
        ["passed different targets"])
# eval_step's own name, and targets None on one process only (its stage reads none): named as
# the targets (it said "different batches to step()", and to seed the generator).
if pp > 1:
    refused(lambda: auto.eval_step(lm.batches(m, seed=0)[0],
                                   None if job_rank() % pp == 0 else lm.batches(m, seed=0)[1]),
            "targets on one process only",
            ["targets: ", "passed different targets to eval_step()"])
print(f"rank {auto.rank}: different batches in one replica refused", flush=True)

# A stateful module shared by two chunks of one process (stage 0 holds chunks 0 and P at V=2):
# that process refuses it and the others are told at once (they waited until their timeout in
# the gather it skipped, naming nobody). And a KeyboardInterrupt inside one process's save is
# told to the others at once (it left them in the save's gather until their timeout).
if dp == 1:
    bn = torch.nn.BatchNorm1d(4)

    def shared_bn(i):
        return torch.nn.Sequential(torch.nn.Linear(4, 4), bn) if i in (0, pp) else \
            torch.nn.Linear(4, 4)

    holder = job_rank() % pp == 0
    refused(lambda: rrfp.Pipeline(shared_bn, lambda o, t: o.sum(), pp=pp, vpp=2,
                                  microbatches=2, transport=transport, timeout=60),
            "a stateful module shared by two chunks",
            ["share a BatchNorm1d"] if holder else ["refused their chunks' stateful modules"],
            (ValueError, RuntimeError))

    class CtrlC:
        def __reduce__(self):
            if job_rank() == 1:
                raise KeyboardInterrupt
            return (CtrlC, ())

    import tempfile  # noqa: E402
    where = os.path.join(tempfile.gettempdir(), f"rrfp-mp-kbi-{os.getppid()}")
    refused(lambda: auto.save(where, note=CtrlC()), "an interrupted save",
            [] if job_rank() == 1 else ["[1]"], (KeyboardInterrupt, RuntimeError))
    print(f"rank {job_rank()}: a refusal and an interrupt at one process told to the others",
          flush=True)

# Structures between processes, one replica: an LSTM whose chunks hand on (output, (h, c)) (its
# state's gradient crossing back between processes too), and a dict with a boolean attention
# mask, integer positions, a constant and an unread output; each trains bitwise as the plain
# loop does.
if dp == 1:
    import test_pytree  # noqa: E402

    def structures(name, build, **kw):
        ref = build(pp)
        ref_losses = test_pytree.train(ref, test_pytree.reference(ref))
        pipe_ = rrfp.Pipeline(lambda i: build(pp)[i], test_pytree.loss_fn, pp=pp,
                              microbatches=4, transport=transport, timeout=60, **kw)
        losses = test_pytree.train([pipe_.chunks[c] for c in sorted(pipe_.chunks)], pipe_.step)
        assert all(torch.equal(a, b) for a, b in zip(losses, ref_losses)), (losses, ref_losses)
        for c, module in pipe_.chunks.items():
            for (pn, p), q in zip(ref[c].named_parameters(), module.parameters()):
                assert torch.equal(p, q), f"{name}: rank {pipe_.rank} chunk {c} {pn} differs"
        print(f"rank {pipe_.rank}: {name} across processes, bitwise", flush=True)

    structures("an LSTM's (output, (h, c))", test_pytree.lstm_lm, hint="bfw", split_backward="on")
    structures("a dict with an attention mask", test_pytree.masked, hint="bf")

# Checkpoints across layouts, and a save that fails on one process (mp_checkpoint.py).
import mp_checkpoint  # noqa: E402

mp_checkpoint.run(pp, dp, m, transport)

# Tied input/output embeddings under DP x PP, V-shape (mp_tied.py).
import mp_tied  # noqa: E402

mp_tied.run_vshape(pp, dp, m, transport)

# Evaluation with a process per stage (mp_eval.py).
import mp_eval  # noqa: E402

mp_eval.run(pp, dp, m, transport)

# Ordered forwards, seeded dropout and replicas' state (mp_state.py).
import mp_state  # noqa: E402

mp_state.run(pp, dp, transport, job_rank())

# Options that differ between the processes, refused on every one (mp_options.py).
import mp_options  # noqa: E402

mp_options.run(pp, dp, transport, job_rank())

# Processes forked from the job's end alone, and the job goes on (mp_fork.py).
import mp_fork  # noqa: E402

mp_fork.run(pp, dp, m, transport)

# One process pausing alone between calls longer than the timeout (mp_pause.py).
if (transport, dp) in (("mpi", 1), ("c10d", 2)):
    import mp_pause  # noqa: E402

    mp_pause.run(pp, dp, m, transport, job_rank())

# A step that fails on one process is dropped on every one, and training goes on
# (mp_failure.py).
import mp_failure  # noqa: E402

mp_failure.run(pp, dp, m, transport, job_rank())
