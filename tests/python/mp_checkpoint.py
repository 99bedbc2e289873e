"""Checkpoints across layouts: the processes (a process per stage, V = 2) train 3 steps of AdamW
and save; rank 0 loads the folder into one process with every chunk a stage of its own
(threads) and trains 3 more: bitwise the 6 uninterrupted steps of a plain loop. With dp > 1
replica 0 writes and every replica must hold the same values.
A save to a folder of each process's own (a disk of each machine) and a load that fails on
one process change nothing on any process. Each process gets back its own extra.
Run by multiprocess_pipeline.py under mpirun and torchrun."""
import errno
import json
import os
import shutil
import tempfile

import torch

import lm
import rrfp


def adamw(modules):
    return torch.optim.AdamW([p for c in modules for p in c.parameters()], lr=0.01)


def train_steps(chunks, step_fn, opt, first, count, m, replica=0):
    for s in range(first, first + count):
        for c in chunks:
            for p in c.parameters():
                p.grad = None
        xs, ys = lm.batches(m, seed=s * 100 + replica)
        step_fn(xs, ys)
        opt.step()


def run(pp, dp, m, transport):
    n = 2 * pp
    folder = os.path.join(tempfile.gettempdir(), f"rrfp-ckpt-{transport}-{dp}-{os.getppid()}")
    ckpt = rrfp.Pipeline(lambda i: lm.chunks(n)[i], lm.loss_fn, pp=pp, vpp=2, microbatches=m,
                         transport=transport, dp=dp, timeout=60)
    opt = adamw(ckpt.chunks.values())
    train_steps(list(ckpt.chunks.values()), ckpt.step, opt, 0, 3, m, ckpt.replica)
    ckpt.save(folder, opt, step=3)
    if ckpt.rank == 0:  # replica 0 wrote one part per stage
        with open(os.path.join(folder, "manifest.json")) as f:
            token = json.load(f)["token"]
        assert sorted(os.listdir(folder)) == sorted(
            ["manifest.json"] + [rrfp.checkpoint.part_name(r, token) for r in range(pp)]), \
            os.listdir(folder)
    # A save that fails on one process (rank 1's disk full as it writes its part) raises on every
    # process and leaves the folder's checkpoint of step 3 whole, which the threads below resume
    # from bitwise (the parts of two saves were left mixed and loaded silently).
    if pp > 1:
        ckpt._core.all_gather([])  # rank 0 has listed the folder
        before = sorted(os.listdir(folder))
        write = rrfp.checkpoint._write_file
        if ckpt.rank == 1:
            def full(path, data):
                raise OSError(errno.ENOSPC, "No space left on device")
            rrfp.checkpoint._write_file = full
        try:
            ckpt.save(folder, opt, step=4)
        except (OSError, RuntimeError) as e:
            want = "No space left" if ckpt.rank == 1 else "could not write their part"
            assert want in str(e), e
        else:
            raise AssertionError(f"rank {ckpt.rank}: a save that failed on rank 1 went on")
        rrfp.checkpoint._write_file = write
        ckpt._core.all_gather([])  # every process has cleaned up
        if ckpt.rank == 0:
            assert sorted(os.listdir(folder)) == before, os.listdir(folder)
    own_extras(ckpt, n, m, folder + "-extras")
    if pp > 1:
        unshared_save(ckpt, opt, folder)
        failed_load(pp, dp, m, transport, folder)
        other_saves(ckpt, folder)
        optimizer_on_some_stages(ckpt, opt, folder)
    if dp > 1:
        replica_folders(ckpt, opt, folder)
        optimizer_on_one_replica(ckpt, opt, folder)
    if ckpt.rank == 0 and dp == 1:
        ref = lm.chunks(n)
        ref_opt = adamw(ref)
        train_steps(ref, lambda xs, ys: lm.reference_step(ref, xs, ys), ref_opt, 0, 6, m)
        again = lm.chunks(n, seed=99)
        threads = rrfp.Pipeline(again, lm.loss_fn, pp=n, microbatches=m, transport="inproc",
                                timeout=60)
        opt2 = adamw(again)
        assert threads.load(folder, opt2) == {"step": 3}
        train_steps(again, threads.step, opt2, 3, 3, m)
        for c in range(n):
            for (pn, p), q in zip(ref[c].named_parameters(), again[c].parameters()):
                assert torch.equal(p, q), f"checkpoint: chunk {c} {pn} differs"
        print(f"rank 0: saved by {pp} processes (V=2), resumed in {n} threads, bitwise", flush=True)
    if ckpt.rank == 0:
        shutil.rmtree(folder, ignore_errors=True)


def own_extras(ckpt, n, m, folder):
    """Every process gets back the extra it saved (a sampler's position), every replica's
    too: load() gave each process rank 0's, and replica 1's were never written. Loaded by
    another layout (threads, on every process), extras that differ between the processes that
    saved them are refused, naming why; no process there saved any of them."""
    position = 100 * ckpt.replica + ckpt.rank
    ckpt.save(folder, None, step=3, position=position)
    got = ckpt.load(folder)
    assert got == {"step": 3, "position": position}, (ckpt.rank, got)
    threads = rrfp.Pipeline(lm.chunks(n), lm.loss_fn, pp=n, microbatches=m, transport="inproc",
                            timeout=60)
    try:
        threads.load(folder)
    except ValueError as e:
        assert "saved different extras (process 0's and process 1's differ)" in str(e), e
        assert f"{ckpt._core.world} process(es) with dp={ckpt._dp}" in str(e), e
    else:
        raise AssertionError(f"rank {ckpt.rank}: extras of each process loaded by another layout")
    ckpt._core.all_gather([])  # every process has loaded before the folder goes
    if ckpt.rank == 0:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"rank {ckpt.rank}: each process's own extra back from load()", flush=True)


def unshared_save(ckpt, opt, folder):
    """Each process given a folder of its own, as on a disk of each machine: every process
    raises, naming the parts process 0 does not see, and leaves nothing (a manifest naming
    parts that no folder held was committed, and the previous parts removed)."""
    own = f"{folder}-rank{ckpt.rank}"
    try:
        ckpt.save(own, opt, step=5)
    except FileNotFoundError as e:
        assert "part-1." in str(e) and "one folder that every process shares" in str(e), e
        # Process 0's folder is not named by another process's path.
        assert (f"in '{own}'" if ckpt.rank == 0 else f"in its path (here '{own}')") in str(e), e
    else:
        raise AssertionError(f"rank {ckpt.rank}: a save to folders of each process's own "
                             "returned")
    assert not os.path.isdir(own) or os.listdir(own) == [], os.listdir(own)
    ckpt._core.all_gather([])  # every process has looked before any folder goes
    shutil.rmtree(own, ignore_errors=True)


def replica_folders(ckpt, opt, folder):
    """Each replica given a folder of its own (a disk of each replica's machines): only replica
    0 writes, so the others would have committed a checkpoint they cannot load. Every process
    raises, naming the processes that do not see the parts, and nothing is committed."""
    own = f"{folder}-replica{ckpt.replica}"
    try:
        ckpt.save(own, opt, step=5)
    except FileNotFoundError as e:
        others = list(range(ckpt.pp, ckpt._core.world))
        assert f"process(es) {others} (replicas other than 0, which write no part) do not see " \
               "the parts replica 0 wrote" in str(e), e
    else:
        raise AssertionError(f"rank {ckpt.rank}: a save to a folder of each replica returned")
    assert not os.path.exists(os.path.join(own, "manifest.json")), os.listdir(own)
    ckpt._core.all_gather([])  # every process has looked before any folder goes
    shutil.rmtree(own, ignore_errors=True)


def optimizer_on_one_replica(ckpt, opt, folder):
    """A load given the optimizer in replica 0 and not in the others: refused on every process,
    nothing loaded (replica 0 took the checkpoint's moments and the others kept theirs, and
    the replicas trained apart from then on, silently)."""
    where = folder + "-optimizer"
    ckpt.save(where, opt)
    params = [p for c in ckpt.chunks.values() for p in c.parameters()]
    with torch.no_grad():
        for p in params:
            p.add_(1.0)
    before = [p.detach().clone() for p in params]
    try:
        ckpt.load(where, opt if ckpt.replica == 0 else None)
    except ValueError as e:
        assert f"stage 0's optimizer was given on process 0 and not on process {ckpt.pp} " \
               "(another replica)" in str(e), e
        assert "nothing was loaded on any process" in str(e), e
    else:
        raise AssertionError(f"rank {ckpt.rank}: a load with the optimizer in one replica alone "
                             "went on")
    assert all(torch.equal(a, b) for a, b in zip(before, params)), \
        f"rank {ckpt.rank}: a refused load changed a chunk"
    ckpt.load(where, opt)  # alike everywhere
    ckpt._core.all_gather([])  # every process has loaded before the folder goes
    if ckpt.rank == 0:
        shutil.rmtree(where, ignore_errors=True)


def optimizer_on_some_stages(ckpt, opt, folder):
    """A save given the optimizer on process 0 alone: refused on every process, nothing
    committed (the checkpoint held stage 0's optimizer state alone, and only a load with the
    optimizer, which refused it, told)."""
    where = folder + "-some-optimizer"
    try:
        ckpt.save(where, opt if ckpt.rank == 0 else None)
    except ValueError as e:
        lack = ", ".join(str(r) for r in range(1, ckpt.pp))
        assert f"the optimizer was given on process(es) 0 and not on process(es) {lack}, whose " \
               "chunks hold trainable parameters" in str(e), e
        assert "nothing was saved" in str(e), e
    else:
        raise AssertionError(f"rank {ckpt.rank}: a save with the optimizer on process 0 alone "
                             "went on")
    assert not os.path.exists(os.path.join(where, "manifest.json")), os.listdir(where)
    ckpt._core.all_gather([])  # every process has looked before the folder goes
    if ckpt.rank == 0:
        shutil.rmtree(where, ignore_errors=True)


def other_saves(ckpt, folder):
    """Process 0 loads one save and the others another under their path (a stale copy on
    each node's own disk): every process raises, and none loaded anything (they trained a
    model of two checkpoints, silently)."""
    ckpt.save(folder + "-a")
    ckpt.save(folder + "-b")
    zeroed = [p for c in ckpt.chunks.values() for p in c.parameters()]
    with torch.no_grad():
        for p in zeroed:
            p.zero_()
    try:
        ckpt.load(folder + ("-a" if ckpt.rank == 0 else "-b"))
    except ValueError as e:
        others = list(range(1, ckpt._core.world))
        assert f"holds another save on process(es) {others} than on process 0" in str(e), e
        assert "nothing was loaded on any process" in str(e), e
    else:
        raise AssertionError(f"rank {ckpt.rank}: loads of two saves went on")
    assert all(not p.any() for p in zeroed), f"rank {ckpt.rank}: a refused load changed a chunk"
    ckpt.load(folder + "-b")  # one save everywhere
    assert any(p.any() for p in zeroed), f"rank {ckpt.rank}: the load left the chunks zero"
    ckpt._core.all_gather([])  # every process has loaded before the folders go
    if ckpt.rank == 0:
        for end in ("-a", "-b"):
            shutil.rmtree(folder + end, ignore_errors=True)


def failed_load(pp, dp, m, transport, folder):
    """Rank 1's folder missing: every process raises, and none has loaded anything (rank 0
    loaded its chunks and then raised, before)."""
    n = 2 * pp
    fresh = rrfp.Pipeline(lambda i: lm.chunks(n, seed=99)[i], lm.loss_fn, pp=pp, vpp=2,
                          microbatches=m, transport=transport, dp=dp, timeout=60)
    opt = adamw(fresh.chunks.values())
    before = [p.detach().clone() for c in fresh.chunks.values() for p in c.parameters()]
    try:
        fresh.load(folder if fresh.rank != 1 else folder + "-on-another-disk", opt)
    except (FileNotFoundError, RuntimeError) as e:
        said = str(e)
    else:
        raise AssertionError(f"rank {fresh.rank}: a load that failed on rank 1 returned")
    after = [p for c in fresh.chunks.values() for p in c.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(before, after)), \
        f"rank {fresh.rank}: a failed load changed the chunks"
    assert not opt.state, f"rank {fresh.rank}: a failed load changed the optimizer"
    assert ("no such folder" if fresh.rank == 1 else "nothing was loaded on any process") in said, said
