"""Options that differ between the processes of a job are refused at construction, on every
process alike, naming the option and both values; run by multiprocess_pipeline.py under mpirun
and torchrun. Each process runs its own copy of the schedule from them: another split backward
overflowed the other processes' step records with its W tasks (a crash at teardown), another
comm broke the protocol, another hint deadlocked until the timeout, another microbatch count
was taken for different batches and another seed drew other dropout, silently. Only the
constructor runs: without the agreement each case is accepted, and the test fails at once."""
import os
import tempfile

import torch

import lm
import rrfp

# (name, what the job's last process passes instead, what each refusal must say): process 0
# keeps the defaults below.
BASE = dict(microbatches=4, hint="bf", policy="ready", split_backward="auto", comm="async",
            limit=None, max_pending_w=None, seed=None, vpp=1, ordered_forwards=None)
CASES = [
    ("split_backward", dict(hint="bfw", split_backward="on"),
     ["split_backward: process 0 gave 'auto', process {last} gave 'on'",
      "hint: process 0 gave 'bf', process {last} gave 'bfw'"]),
    ("comm", dict(comm="blocking"), ["comm: process 0 gave 'async', process {last} gave "
                                     "'blocking'"]),
    ("hint and policy", dict(hint="gpipe", policy="fixed"),
     ["hint: process 0 gave 'bf', process {last} gave 'gpipe'",
      "policy: process 0 gave 'ready', process {last} gave 'fixed'"]),
    ("microbatches", dict(microbatches=8), ["microbatches: process 0 gave 4, process {last} "
                                            "gave 8"]),
    ("seed", dict(seed=5), ["seed: process 0 gave None, process {last} gave 5"]),
    ("limit", dict(limit=1), ["limit: process 0 gave None, process {last} gave 1"]),
    ("vpp", dict(vpp=2), ["vpp: process 0 gave 1, process {last} gave 2"]),
    ("ordered_forwards", dict(ordered_forwards=False),
     ["ordered_forwards: process 0 gave None, process {last} gave False"]),
]


def refuse_other_options(pp, dp, transport, job_rank):
    last = pp * dp - 1
    for name, other, words in CASES:
        kw = dict(BASE, **(other if job_rank == last else {}))
        vpp = kw.pop("vpp")
        try:
            rrfp.Pipeline(lambda i: lm.chunks(pp * vpp)[i], lm.loss_fn, pp=pp, vpp=vpp, dp=dp,
                          transport=transport, timeout=30, **kw)
        except ValueError as e:
            said = [w.format(last=last) for w in words]
            assert all(w in str(e) for w in said), (job_rank, name, str(e))
        else:
            raise AssertionError(f"rank {job_rank}: a different {name} on process {last} was "
                                 "accepted")
    # The same options everywhere still build and train.
    pipe = rrfp.Pipeline(lambda i: lm.chunks(pp)[i], lm.loss_fn, pp=pp, dp=dp,
                         transport=transport, timeout=30, **BASE)
    assert pipe.step(*lm.batches(4, seed=pipe.replica)) is not None
    print(f"rank {job_rank}: options that differ between processes refused on every process",
          flush=True)


def hint_file(pp, job_rank, backwards):
    """A hint file of this process's own (its own path, as on a machine of its own) running
    each stage's backwards in `backwards` order."""
    lines = ["rrfp-hint 1 pp=%d vpp=1 microbatches=4 placement=loop split=0" % pp]
    for s in range(pp):
        lines.append(f"stage {s}: " + " ".join([f"F{s}:{mb}" for mb in range(4)] +
                                               [f"B{s}:{mb}" for mb in backwards]))
    path = os.path.join(tempfile.gettempdir(), f"rrfp-mp-hint-{os.getppid()}-{job_rank}.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def compare_hint_files(pp, dp, transport, job_rank):
    """Hint files are compared by their contents: the same order at other paths builds, another
    order is refused, naming the file and its digest."""
    last = pp * dp - 1
    for other in (False, True):
        order = [0, 1, 2, 3] if other and job_rank == last else [3, 2, 1, 0]
        path = hint_file(pp, job_rank, order)
        try:
            rrfp.Pipeline(lambda i: lm.chunks(pp)[i], lm.loss_fn, pp=pp, dp=dp, microbatches=4,
                          hint=path, policy="fixed", transport=transport, timeout=30)
        except ValueError as e:
            assert other and "hint: process 0 gave '" in str(e) and \
                f"process {last} gave '" in str(e) and "(a hint file, sha256 " in str(e), e
        else:
            assert not other, f"rank {job_rank}: another hint file's order was accepted"
        os.remove(path)


def refuse_other_layout(pp, dp, transport, job_rank):
    """A pp and dp of the same product that differ between processes: under torchrun each
    process made the subgroups of its own layout, and new_group waited for ever, before the
    options were compared (no timeout applies there)."""
    world, last = pp * dp, pp * dp - 1
    mine = (1, world) if job_rank == last else (pp, dp)
    try:
        rrfp.Pipeline(lambda i: lm.chunks(mine[0])[i], lm.loss_fn, pp=mine[0], dp=mine[1],
                      microbatches=4, transport=transport, timeout=30)
    except ValueError as e:
        said = [f"pp: process 0 gave {pp}, process {last} gave 1",
                f"dp: process 0 gave {dp}, process {last} gave {world}"]
        assert all(w in str(e) for w in said), (job_rank, str(e))
    else:
        raise AssertionError(f"rank {job_rank}: pp={mine[0]}, dp={mine[1]} on process {last} "
                             "was accepted")


def refuse_other_autocast(pp, dp, transport, job_rank):
    """torch.autocast around step() on the last process alone: its stage's tasks ran in
    bfloat16 and the others' in float32, silently (a dtype error naming none of it where the
    first process alone entered it). Refused on every process before the step; then the step
    runs, every process under one autocast."""
    last = pp * dp - 1
    pipe = rrfp.Pipeline(lm.chunks(pp), lm.loss_fn, pp=pp, microbatches=4, transport=transport,
                         dp=dp, timeout=60)
    batch = lm.batches(4)
    grads = [p.grad for c in pipe.chunks.values() for p in c.parameters()]
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=job_rank == last):
        try:
            pipe.step(*batch)
        except ValueError as e:
            want = (f"step: the processes run it under different autocast (job rank 0 under no "
                    f"autocast, job rank(s) {[last]} under autocast cpu bfloat16)")
            assert want in str(e), e
        else:
            raise AssertionError(f"rank {job_rank}: a step under autocast on one process ran")
    assert grads == [p.grad for c in pipe.chunks.values() for p in c.parameters()]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        pipe.step(*batch)


def refuse_other_modes(pp, dp, transport, job_rank):
    """model.eval() on job rank 0 alone (rank 0 evaluating, then not switching back): its stage
    ran without dropout and with frozen batch-norm statistics while the others trained with
    both, silently. Refused on every process before the step where every process holds the
    whole model (a list of chunks) and, with chunk_fn, between the replicas of a stage; a part
    put in eval() alike on every process trains."""
    world, chunks = pp * dp, lm.chunks(pp)
    n = len(list(chunks[0].modules()))
    fns = [chunks] + ([lambda i: lm.chunks(pp)[i]] if dp > 1 else [])
    for built in fns:
        pipe = rrfp.Pipeline(built, lm.loss_fn, pp=pp, microbatches=4, transport=transport,
                             dp=dp, timeout=60)
        held = chunks if built is chunks else list(pipe.chunks.values())
        for c in held if job_rank == 0 else []:
            c.eval()
        # Replicas apart are named first; with one, every copy apart from rank 0's.
        others = list(range(1, world)) if built is chunks and dp == 1 else [pp]
        try:
            pipe.step(*lm.batches(4))
        except ValueError as e:
            want = (f"step: the processes hold chunk 0 in different train()/eval() modes (job "
                    f"rank 0, which runs it, with 0 of its {n} modules in training, job rank(s) "
                    f"{others} with {n} of its {n} modules in training)")
            assert want in str(e), (job_rank, str(e))
        else:
            raise AssertionError(f"rank {job_rank}: a step with chunk 0 in eval() on rank 0 "
                                 "alone ran")
        for c in held:
            c.train()
            c[0].eval()  # the same part frozen on every process
        assert pipe.step(*lm.batches(4)) is not None
        # Each process switching only the chunks it runs (docs/python.md's evaluation) leaves
        # the copies it does not run behind, every runner alike: no refusal.
        for c in pipe.chunks.values():
            c.eval()
        assert pipe.eval_step(*lm.batches(4)) is not None
        for c in held:
            c.train()
    print(f"rank {job_rank}: train()/eval() modes that differ between processes refused",
          flush=True)


def refuse_pipelines_apart(pp, dp, transport, job_rank):
    """Two pipelines alive, their calls made in another order on job rank 0 than on the others:
    under mpirun, where both gather over the job's one communicator, rank 0's
    a.clip_grad_norm_() met the others' b.clip_grad_norm_(), and every process went on with a
    norm of both models (a save likewise committed a checkpoint of both). Refused on every
    process, naming each one's pipeline; both then go on, called alike."""
    a, b = (rrfp.Pipeline(lambda i, s=s: lm.chunks(pp, seed=s)[i], lm.loss_fn, pp=pp,
                          microbatches=4, transport=transport, dp=dp, timeout=60)
            for s in (0, 1))
    for pipe in (a, b):
        pipe.step(*lm.batches(4, seed=3))
    first = a if job_rank == 0 else b
    try:
        first.clip_grad_norm_(1.0)
    except RuntimeError as e:
        for r, pipe in ((0, a), (1, b)):
            want = f"job rank {r} in clip_grad_norm_() of pipeline {pipe._number} after 1 steps"
            assert want in str(e), (job_rank, str(e))
    else:
        raise AssertionError(f"rank {job_rank}: clip_grad_norm_() of two pipelines paired")
    for pipe in (a, b):
        pipe.clip_grad_norm_(1.0)
        pipe.step(*lm.batches(4, seed=4))
    print(f"rank {job_rank}: two pipelines called in different orders refused", flush=True)


def run(pp, dp, transport, job_rank):
    torch.manual_seed(0)
    refuse_other_autocast(pp, dp, transport, job_rank)
    refuse_other_modes(pp, dp, transport, job_rank)
    if transport == "c10d":  # an MPI job takes one layout while pipelines of it are alive
        refuse_other_layout(pp, dp, transport, job_rank)
    else:  # over c10d each pipeline gathers over groups of its own
        refuse_pipelines_apart(pp, dp, transport, job_rank)
    refuse_other_options(pp, dp, transport, job_rank)
    compare_hint_files(pp, dp, transport, job_rank)
