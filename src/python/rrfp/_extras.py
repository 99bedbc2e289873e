"""The `extra` of Pipeline.save, each process's own: every process gets back from load() the
extra it saved (a sampler's position, a data shard's offset), not rank 0's. A part (replica 0's
process of a stage writes it) holds the serialized extras of that stage's every replica, keyed
by job rank, and the job's layout; a load by another layout gives every process the saved
extra only when they are all the same, and refuses otherwise, as no process there is the one
that saved any of them."""
import io
import pickle

import torch

# What a part holds: {job rank: the user's extra, serialized} over its stage's replicas, and
# [processes, dp] of the job that saved it.
EXTRAS, LAYOUT = "extras", "layout"


def serialized(extra):
    """The user's `extra` as bytes (torch.save's, so tensors keep their values and dtype).
    Raises TypeError naming the entry pickle cannot take (a lambda, a lock, an open file): its
    own AttributeError or TypeError named no argument."""
    try:
        buf = io.BytesIO()
        torch.save(extra, buf)
        return buf.getvalue()
    except (pickle.PicklingError, AttributeError, TypeError) as e:
        for key, value in extra.items():
            try:
                torch.save(value, io.BytesIO())
            except (pickle.PicklingError, AttributeError, TypeError):
                raise TypeError(f"save: extra {key!r} cannot be saved: {e}") from e
        raise TypeError(f"save: the extras cannot be saved: {e}") from e


def stage_extras(pipe, mine):
    """{job rank: serialized extra} of this stage's every replica (`mine`: this process's): a
    collective over the stage's replicas, which replica 0's process writes into its part (the
    other replicas write none). In one process (threads) just {0: mine}."""
    got = pipe._core.dp_all_gather(torch.frombuffer(bytearray(mine), dtype=torch.uint8))
    stage, pp = pipe.rank % pipe.pp, pipe.pp
    return {stage + r * pp: t.numpy().tobytes() for r, t in enumerate(got)}


def layout(pipe):
    return [pipe._core.world, pipe._dp]


def checked(part):
    """Whether a part's extras are absent (an earlier version's part) or of their shape."""
    extras, shape = part.get(EXTRAS), part.get(LAYOUT)
    if extras is None and shape is None:
        return True
    return (isinstance(extras, dict) and all(
        type(r) is int and r >= 0 and isinstance(b, bytes) for r, b in extras.items()) and
        isinstance(shape, list) and len(shape) == 2 and all(type(v) is int for v in shape))


def own_extra(path, saved, layouts, rank, here, first):
    """The extra process `rank` of a job of layout `here` gets back from the parts' `saved`
    extras ({job rank: bytes}) saved by `layouts` (the parts' layouts). The one it saved under
    the same layout; under another, the saved extras when they are all the same, else
    ValueError. `first`: what a checkpoint of an earlier version gives (the first part's
    extra, as it kept no other)."""
    if not saved:
        return first
    if len(layouts) == 1 and layouts[0] == here and rank in saved:
        return _read(path, rank, saved[rank])
    ranks = sorted(saved)
    value = _read(path, ranks[0], saved[ranks[0]])
    for r in ranks[1:]:
        if saved[r] != saved[ranks[0]] and not same(_read(path, r, saved[r]), value):
            then = " or ".join(f"{n} process(es) with dp={d}" for n, d in layouts)
            raise ValueError(
                f"load: checkpoint '{path}': the processes that saved it saved different extras "
                f"(process {ranks[0]}'s and process {r}'s differ), and it was saved by {then}, "
                f"where this job has {here[0]} with dp={here[1]}: no process here saved any of "
                "them, so none can be given its own; load it with the layout that saved it, or "
                "save the same extras on every process")
    return value


def _read(path, rank, data):
    try:
        return torch.load(io.BytesIO(data), map_location="cpu")
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001 (a damaged file: whatever torch raises for it)
        raise ValueError(f"checkpoint '{path}': process {rank}'s saved extra could not be read "
                         f"(damaged?): {type(e).__name__}: {str(e)[:200]}") from e


def same(a, b):
    """Whether two loaded extras hold the same values (tensors by value, dtype and shape; a
    tensor's == compared elementwise, and could not be one answer)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and
                a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b))
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 (an == of no single answer, a numpy array's say)
        return pickle.dumps(a) == pickle.dumps(b)
