"""Tied embeddings across processes, run by multiprocess_pipeline.py under mpirun and torchrun:
a GPT whose first chunk's token embedding is its last chunk's output projection, with the first
and last chunks on different processes (placement "loop"). Each process keeps a copy; the
pipeline makes the copies equal at construction (the last stage's copy starts elsewhere here),
and each step gives both the sum of the two copies' own sums, added in chunk order (then the
replicas' sums, in replica order), clipped by the model's norm with the tie counted once.

The reference is a plain loop over the model with the tie cut (the head gets its own copy of
the embedding): each copy's gradient summed over the microbatches, then the two added. The
copies stay bitwise equal, every parameter ends bitwise the reference's, and checkpoints carry
the tie's optimizer state between this layout and threads (where the tie is one parameter)
both ways."""
import copy
import os
import tempfile

import torch

import lm
import rrfp
import test_tied

STEPS, CLIP = 2, 0.5


def sgd(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def reference(pp, dp, m):
    ref = test_tied.tied_gpt(pp)
    tok, head = ref[0][0].tok, ref[-1][-1]
    head.embed = copy.deepcopy(head.embed)  # the tie cut
    cut = head.embed
    params = test_tied.unique_params(ref)
    opt = sgd(params)
    for s in range(STEPS):
        total = [None] * len(params)
        for r in range(dp):
            for p in params:
                p.grad = None
            lm.reference_step(ref, *lm.batches(m, seed=s * 100 + r))
            tok.weight.grad = tok.weight.grad + cut.weight.grad  # the copies' sums, chunk order
            cut.weight.grad = tok.weight.grad.clone()
            total = [p.grad if t is None else t + p.grad for t, p in zip(total, params)]
        for p, g in zip(params, total):
            p.grad = g
        torch.nn.utils.clip_grad_norm_([p for p in params if p is not cut.weight], CLIP)
        cut.weight.grad = tok.weight.grad.clone()
        opt.step()
    return ref, opt, (tok.weight, cut.weight)


def built(pp, m, transport, dp, rank):
    chunks = test_tied.tied_gpt(pp)
    if rank % pp == pp - 1:  # the last stage's copy starts elsewhere: construction copies stage 0's
        with torch.no_grad():
            chunks[-1][-1].embed.weight.add_(1.0)
    pipe = rrfp.Pipeline(chunks, lm.loss_fn, pp=pp, microbatches=m, transport=transport,
                         dp=dp, timeout=60, hint="bf")
    opt = sgd(test_tied.unique_params([chunks[c] for c in sorted(pipe.chunks)]))
    return pipe, chunks, opt


def train(pipe, opt, m):
    for s in range(STEPS):
        for p in opt.param_groups[0]["params"]:
            p.grad = None
        pipe.step(*lm.batches(m, seed=s * 100 + pipe.replica))
        pipe.clip_grad_norm_(CLIP)
        opt.step()


def same(ref, chunks, cs, what):
    for c in cs:
        for (pn, p), q in zip(ref[c].named_parameters(), chunks[c].parameters()):
            assert torch.equal(p, q), f"{what}: chunk {c} {pn} differs"


def same_momentum(opt, ref_opt, tie, ref_tie, what):
    got = opt.state[tie]["momentum_buffer"]
    for ref_p in ref_tie:  # both copies of the reference hold the same
        assert torch.equal(got, ref_opt.state[ref_p]["momentum_buffer"]), what


def run(pp, dp, m, transport):
    ref, ref_opt, ref_tie = reference(pp, dp, m)
    pipe, chunks, opt = built(pp, m, transport, dp, int(os.environ.get(
        "RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0"))))
    train(pipe, opt, m)
    same(ref, chunks, pipe.chunks, f"tied across processes, rank {pipe.rank}")
    holds = pipe.stages[0] in (0, pp - 1)  # the stages of the first and the last chunk
    tie = chunks[0][0].tok.weight  # each process's copy (the last chunk's too)
    assert (tie in opt.state) == holds, f"rank {pipe.rank}: momentum of the tie"
    if holds:
        same_momentum(opt, ref_opt, tie, ref_tie, f"momentum, rank {pipe.rank}")
    print(f"rank {pipe.rank}: tied embeddings across processes (pp={pp} x dp={dp}), clipped, "
          "bitwise", flush=True)

    # Checkpoints: this layout -> threads (the tie one parameter) -> this layout again.
    base = os.path.join(tempfile.gettempdir(), f"rrfp-tied-{transport}-{dp}-{os.getppid()}")
    pipe.save(base + "-a", opt)
    if pipe.rank == 0:
        again = test_tied.tied_gpt(pp)
        threads = rrfp.Pipeline(again, lm.loss_fn, pp=pp, microbatches=m, transport="inproc")
        opt2 = sgd(test_tied.unique_params(again))
        threads.load(base + "-a", opt2)
        same(ref, again, range(pp), "tied, loaded in threads")
        same_momentum(opt2, ref_opt, again[0][0].tok.weight, ref_tie, "tied momentum, threads")
        threads.save(base + "-b", opt2)
    pipe.save(base + "-c")  # every process waits for rank 0's threads to save
    pipe3, chunks3, opt3 = built(pp, m, transport, dp, pipe.rank)
    pipe3.load(base + "-b", opt3)
    same(ref, chunks3, pipe3.chunks, f"tied, loaded from threads, rank {pipe.rank}")
    tie3 = chunks3[0][0].tok.weight
    assert (tie3 in opt3.state) == holds, f"rank {pipe.rank}: loaded momentum of the tie"
    if holds:
        same_momentum(opt3, ref_opt, tie3, ref_tie, f"tied momentum, rank {pipe.rank}")
    # A state whose entries of the tie differ loads its first name's entry in every layout:
    # each process's copy here, and the one object in threads (which took the last chunk's).
    state = {f"{c}.{k}": v.clone() for c, module in enumerate(test_tied.tied_gpt(pp))
             for k, v in module.state_dict().items()}
    state[f"{pp - 1}.1.embed.weight"] += 1.0
    want = state["0.0.tok.weight"]
    pipe3.load_state_dict(state)
    for c, copy_of_tie in ((0, lambda ch: ch[0].tok), (pp - 1, lambda ch: ch[-1].embed)):
        if c in pipe3.chunks:
            assert torch.equal(copy_of_tie(pipe3.chunks[c]).weight, want), \
                f"rank {pipe.rank}: chunk {c}'s copy of the tie"
    if pipe.rank == 0:
        again = test_tied.tied_gpt(pp)
        rrfp.Pipeline(again, lm.loss_fn, pp=pp, microbatches=m,
                      transport="inproc").load_state_dict(state)
        assert torch.equal(again[0][0].tok.weight, want), "the tie in threads"
    # A load that fails on one process alone (rank 0's folder is missing) is told to every
    # process, where the others waited in the copies' exchange.
    try:
        pipe3.load(base + ("-missing" if pipe.rank == 0 else "-b"), opt3)
    except (FileNotFoundError, RuntimeError) as e:
        assert ("no such folder" if pipe.rank == 0 else "could not load the checkpoint") in str(e), e
    else:
        raise AssertionError(f"rank {pipe.rank}: a load that failed on rank 0 went on")
    pipe3.save(base + "-c")  # nobody removes the folders while another process reads them
    if pipe.rank == 0:
        import shutil
        for f in "abc":
            shutil.rmtree(f"{base}-{f}", ignore_errors=True)
    print(f"rank {pipe.rank}: a tie's optimizer state carried between processes and threads",
          flush=True)

    # A copy frozen on the last stage alone: every process refuses the step before it runs,
    # the stages between too (which hold no copy and used to wait for the others' error).
    pipe4, chunks4, _ = built(pp, m, transport, dp, pipe.rank)
    chunks4[-1][-1].embed.weight.requires_grad_(pipe.stages[0] != pp - 1)
    try:
        pipe4.step(*lm.batches(m, seed=pipe4.replica))
    except ValueError as e:
        assert "frozen in others" in str(e), e
    else:
        raise AssertionError(f"rank {pipe.rank}: a tie frozen in one copy was accepted")
    print(f"rank {pipe.rank}: a tie frozen in one copy refused on every process", flush=True)

    # A copy changed on the last stage alone (decayed by its own optimizer group, say) would
    # train on with values of its own: every process refuses the next step before it runs.
    pipe5, chunks5, _ = built(pp, m, transport, dp, pipe.rank)
    pipe5.step(*lm.batches(m, seed=pipe5.replica))
    if pipe.stages[0] == pp - 1 and pipe5.replica == dp - 1:
        with torch.no_grad():
            chunks5[-1][-1].embed.weight.mul_(0.999)
    try:
        pipe5.step(*lm.batches(m, seed=pipe5.replica))
    except ValueError as e:
        assert "hold different values" in str(e), e
        assert dp == 1 or f"in replica {dp - 1}" in str(e), e
    else:
        raise AssertionError(f"rank {pipe.rank}: copies of a tie that drifted apart were accepted")
    print(f"rank {pipe.rank}: copies of a tie that drifted apart refused on every process",
          flush=True)


class Mixer(torch.nn.Module):
    """A chunk whose Linear(8, 8) is one of a tie's copies (a weight shared by three stages)."""

    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.mix = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.tanh(self.mix(x))


def run_three(pp, transport, dp):
    """A weight tied across the first, second and last stages (P >= 3), declared with tied=:
    every copy gets the three copies' sums added in chunk order, bitwise."""
    users = [0, 1, pp - 1]
    tie = [[f"{c}.mix.weight" for c in users]]
    pipe = rrfp.Pipeline(lambda i: Mixer(i), lambda y, t: ((y - t) ** 2).sum(), pp=pp,
                         microbatches=4, transport=transport, dp=dp, timeout=60, tied=tie)
    g = torch.Generator().manual_seed(5)
    xs, ts = [torch.randn(2, 8, generator=g) for _ in range(4)], [torch.randn(2, 8, generator=g)
                                                                   for _ in range(4)]
    pipe.step(xs, ts)
    ref = [Mixer(i) for i in range(pp)]
    with torch.no_grad():
        for c in users[1:]:
            ref[c].mix.weight.copy_(ref[0].mix.weight)
    for x, t in zip(xs, ts):
        for c in ref:
            x = c(x)
        ((x - t) ** 2).sum().backward()
    want = ref[0].mix.weight.grad + ref[1].mix.weight.grad + ref[pp - 1].mix.weight.grad
    if dp > 1:
        want = want + want  # every replica ran the same microbatches
    for c, module in pipe.chunks.items():
        if c in users:
            assert torch.equal(module.mix.weight.grad, want), f"rank {pipe.rank}: chunk {c}"
    print(f"rank {pipe.rank}: a weight tied across three stages, bitwise", flush=True)


def run_shared_buffer(pp, transport, dp):
    """A buffer that every chunk shares as one object: each process holds its own copy, which
    loads the buffer's first name's entry, as the one object does in threads (each copy loaded
    its own chunk's entry)."""
    shared = rrfp.Pipeline(shared_buffer_chunks(pp),
                           lambda y, t: ((y - t) ** 2).sum(), pp=pp, microbatches=4,
                           transport=transport, dp=dp, timeout=60)
    state = {f"{c}.{k}": v.clone() for c, m in enumerate(shared_buffer_chunks(pp))
             for k, v in m.state_dict().items()}
    for c in range(pp):
        state[f"{c}.1.table"] += float(c + 1)
    shared.load_state_dict(state)
    for c, module in shared.chunks.items():
        assert torch.equal(module[1].table, torch.arange(8.0) + 1.0), \
            f"rank {shared.rank}: chunk {c}'s shared buffer"
    print(f"rank {shared.rank}: a buffer shared by every chunk loads its first name's entry",
          flush=True)


class Shift(torch.nn.Module):
    """Adds a buffer it only reads (a positional table): one object that chunks may share."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.arange(8.0))

    def forward(self, x):
        return x + self.table


def shared_buffer_chunks(pp):
    """pp chunks of Linear(8, 8) each followed by the one Shift that every chunk shares."""
    torch.manual_seed(0)
    shift = Shift()
    return [torch.nn.Sequential(torch.nn.Linear(8, 8), shift) for _ in range(pp)]


def run_vshape(pp, dp, m, transport):
    """Tied input/output embeddings under DP x PP: with placement "vshape" the first and the last
    chunk share stage 0, so the tie stays in one process; each replica sums its uses' gradients,
    then the replicas' sums are added in replica order. Bitwise the plain loop's."""
    n = 2 * pp
    ref = test_tied.tied_gpt(n)
    ref_params = test_tied.unique_params(ref)
    ref_opt = torch.optim.SGD(ref_params, lr=0.05)
    tied = test_tied.tied_gpt(n)
    tpipe = rrfp.Pipeline(tied, lm.loss_fn, pp=pp, vpp=2, placement="vshape", microbatches=m,
                          transport=transport, dp=dp, timeout=60, hint="bf")
    mine = test_tied.unique_params([tied[c] for c in sorted(tpipe.chunks)])
    opt = torch.optim.SGD(mine, lr=0.05)
    for s in range(2):
        total = [None] * len(ref_params)
        for r in range(dp):
            for p in ref_params:
                p.grad = None
            xs, ys = lm.batches(m, seed=s * 100 + r)
            lm.reference_step(ref, xs, ys)
            total = [p.grad if t is None else t + p.grad for t, p in zip(total, ref_params)]
        for p, g in zip(ref_params, total):
            p.grad = g
        ref_opt.step()
        opt.zero_grad()
        tpipe.step(*lm.batches(m, seed=s * 100 + tpipe.replica))
        opt.step()
    for c in tpipe.chunks:
        for (pn, p), q in zip(ref[c].named_parameters(), tied[c].parameters()):
            assert torch.equal(p, q), f"tied: rank {tpipe.rank} chunk {c} {pn} differs"
    print(f"rank {tpipe.rank}: tied embeddings under pp={pp} x dp={dp} (V-shape), bitwise",
          flush=True)


def run_held_tensor(pp, transport, dp):
    """A tensor held outside the model that every chunk uses: each process holds its own copy,
    whose .grad has its chunks' share alone, and the step says so once (each copy held a part,
    silently, where threads give the one tensor a plain loop's gradient)."""
    import warnings

    scale = torch.full((8,), 0.5, requires_grad=True)

    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x):
            return torch.tanh(self.lin(x) * scale)

    torch.manual_seed(0)
    pipe = rrfp.Pipeline([Scaled() for _ in range(pp)], lambda y, t: ((y - t) ** 2).sum(),
                         pp=pp, microbatches=4, transport=transport, dp=dp, timeout=60)
    for step in range(2):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            pipe.step(torch.randn(8, 8), torch.randn(8, 8))
        said = [w for w in seen if "no part of the model (shape (8,))" in str(w.message)]
        assert len(said) == (1 if step == 0 else 0), \
            f"rank {pipe.rank}: step {step}: {[str(w.message) for w in seen]}"
    print(f"rank {pipe.rank}: a tensor outside the model that every process's chunks use is "
          "said to hold each process's share", flush=True)
