"""What data-parallel replicas keep equal: their gradients, summed in replica order
(sum_over_replicas), the first replica's parameters when the pipeline is built, and its
buffers after every step (and before the step after a failed one), as DistributedDataParallel
broadcasts them from rank 0. Without it, replicas whose chunks were initialised apart (a
script that seeds by rank, or not at all) trained apart silently, and batch norm's running
statistics, which each replica updates from its own microbatches, differed from replica to
replica: the same evaluation gave other outputs on each."""
import zlib

import torch

from . import _wire
from ._calls import call_of
from ._launch import agreed


_LOSS = "loss_fn"  # the owner of loss_fn's buffers


def replicated(pipe):
    """What the replicas keep equal on this process, by owner: its chunks by index, and
    `loss_fn` where it is a module and this process runs the last chunk, whose forward task
    calls it (its buffers only: a loss_fn's parameters get no gradient, docs/python.md). A
    loss_fn holding a batch norm kept each replica's own running statistics."""
    owners = dict(pipe.chunks)
    loss = pipe._data.loss_fn
    if isinstance(loss, torch.nn.Module) and pipe._core.chunks - 1 in owners:
        owners[_LOSS] = loss
    return owners


def _order(owner):
    """A sort key over owners: the chunks by index, then loss_fn."""
    return (isinstance(owner, str), owner)


def _key_order(key):
    """A sort key over (owner, name) keys."""
    return (_order(key[0]), key[1])


def _owner(owner):
    """An owner as errors name it."""
    return owner if isinstance(owner, str) else f"chunk {owner}"


def _entries(owners, params):
    """((owner, name), tensor) of this process's owners (replicated): buffers, and the chunks'
    parameters if asked."""
    out = []
    for c in sorted(owners, key=_order):
        if params and c != _LOSS:
            out += [((c, n), p) for n, p in owners[c].named_parameters()]
        out += [((c, n), b) for n, b in owners[c].named_buffers()]
    return out


def buffer_signature(owners):
    """What the replicas must agree on before replica 0's buffers are copied into the others:
    each buffer of this process's owners (replicated) as ((owner, name), dtype, shape),
    picklable."""
    return [(key, str(b.dtype), tuple(b.shape)) for key, b in _entries(owners, False)
            if b is not None]


def refuse_other_buffers(every, pp, call):
    """Refuses, on every process alike, buffers that replica 0's could not be copied into:
    `every` is every job rank's buffer_signature (job rank r is replica r // pp, stage r % pp),
    learnt in the step's closing exchange, which every process makes. Checked before any .grad
    is written and any buffer copied (from_first_replica), the step is then dropped everywhere.
    Before, only the other replicas' processes of the chunk's stage compared shapes, after
    their .grad was written and some buffers copied, while replica 0's processes returned: the
    replicas went on training apart, silently."""
    for r in range(pp, len(every)):
        first, mine = _keyed(every[r % pp]), _keyed(every[r])
        key = next((k for k in sorted(first.keys() | mine.keys(), key=_key_order)
                    if first.get(k) != mine.get(k)), None)
        if key is None:
            continue
        c, name = key
        replica = r // pp
        if key not in first or key not in mine:
            what = (f"is missing in replica {replica}" if (c, name) in first else
                    f"is in replica {replica} but missing in replica 0")
        else:
            what = (f"is {mine[(c, name)][0]} {mine[(c, name)][1]} in replica {replica} but "
                    f"{first[(c, name)][0]} {first[(c, name)][1]} in replica 0")
        raise ValueError(
            f"dp: after {call}, {_owner(c)}'s buffer '{name}' {what}; every replica takes replica "
            "0's buffers after each step, so the replicas' buffers must keep the same names, "
            "shapes and dtypes (a buffer sized by the batch differs where the replicas' "
            "batches do); refused on every process before any .grad was written or buffer copied")


def _keyed(signature):
    """A buffer_signature as {(owner, name): (dtype, shape)}."""
    return {key: (dtype, shape) for key, dtype, shape in signature}


def from_first_replica(core, owners, params):
    """Copies the first replica's buffers (and the chunks' parameters, with `params`) of this
    process's owners (replicated) into every other replica's, bit for bit. A collective over
    each stage's replicas: every process of the job calls it alike. Nothing to do with one
    replica. After a step the replicas' buffers were checked already on every process
    (refuse_other_buffers); the check here is for the parameters at construction, and the
    buffers after a failed step, which the caller tells every process (agreed). Every entry
    is checked before any is copied, so a refusal copies nothing."""
    if core.world == 1:
        return
    entries = _entries(owners, params)
    first = core.replica == 0
    # Only the first replica's state travels: the others send an empty list.
    every = core.dp_all_gather(_wire.pack(entries if first else []))
    if first or len(every) == 1:
        return
    theirs = dict(_wire.unpack(every[0]))
    mine = dict(entries)
    if theirs.keys() != mine.keys():
        missing = (sorted(theirs.keys() - mine.keys(), key=_key_order)
                   + sorted(mine.keys() - theirs.keys(), key=_key_order))
        c, name = missing[0]
        raise ValueError(f"replica {core.replica}: {_owner(c)}'s '{name}' is "
                         + ("missing here" if (c, name) in theirs else "missing in replica 0")
                         + "; every replica must build the same chunks")
    pairs = [(t, theirs[key]) for key, t in mine.items()
             if t is not None and theirs[key] is not None]
    for key, t in mine.items():
        src = theirs[key]
        if src is not None and t is not None and (src.shape != t.shape or src.dtype != t.dtype):
            raise ValueError(f"replica {core.replica}: {_owner(key[0])}'s '{key[1]}' is "
                             f"{t.dtype} {tuple(t.shape)} here but {src.dtype} "
                             f"{tuple(src.shape)} in replica 0; every replica must build "
                             "the same chunks")
    with torch.no_grad():
        for t, src in pairs:
            t.copy_(src)


def copy_if_apart(pipe, apart, call):
    """Before a step (`call`), where check_before_step found any process's buffers apart from
    replica 0's (`apart`: a failed step leaves each replica's as its own forwards left them),
    copies replica 0's into every replica on every process, a refusal told to all. A failed
    step's replicas kept their own running statistics, and an eval_step after it gave other
    outputs on each replica, until a step succeeded."""
    if apart:
        agreed(pipe._core, lambda: from_first_replica(pipe._core, replicated(pipe), False),
               f"{call}: process(es) {{bad}} could not take replica 0's buffers after a failed "
               "step; their own errors say why", call_of(pipe, call))
    pipe._buffers_apart = False


def trained_layout(chunks, chunk_params, dp):
    """A mark of which parameters this process trains (each chunk's trainable ones, by their
    place in its parameters(), with their shapes and dtypes: a parameter replaced by one of
    another shape in one replica failed the replicas' sum on its stage alone, whose processes
    raised while the others' step went on): below 2**24 / dp, so that the dp replicas' marks
    add exactly (in the float64 that sum_over_replicas carries them in, with room to spare)."""
    crc = 0
    for c in sorted(chunk_params):
        place = {id(p): i for i, p in enumerate(chunks[c].parameters())}
        crc = zlib.crc32(",".join(f"{c}.{place[id(p)]}:{tuple(p.shape)}:{p.dtype}"
                                  for p in chunk_params[c]).encode(), crc)
    return crc % ((1 << 24) // dp)


def sum_over_replicas(core, dp, pairs, layout):
    """This replica's (parameter, gradient sum) pairs summed with every replica's, in replica
    order and in each gradient's own dtype (the arithmetic of a loop adding the replicas' sums):
    one collective (the job's replica sum, which the C++ trainer's gradients take too) over the
    gradients flattened, one flat tensor a dtype, with a count per parameter of the replicas
    that gave it one and the replicas' marks of what they train (trained_layout).

    A parameter no replica's loss reached keeps its .grad (None, say), as a plain loop over
    every replica's microbatches leaves it, rather than a gradient of zeros, which an optimizer
    would apply (weight decay, moments). A sparse gradient (nn.Embedding(sparse=True)) is summed,
    and comes back, dense: refused on its own process alone, the others would wait for it.
    Replicas that train other parameters are refused on each of them: other sizes or dtypes by
    the sum itself, the same ones by the marks."""
    device = pairs[0][0].device if pairs else torch.device("cpu")
    dtypes = list(dict.fromkeys(p.dtype for p, _ in pairs))
    # torch.cat makes tensors of their own, which the sum may overwrite.
    flats = [torch.cat([(torch.zeros_like(p) if g is None else g.to_dense() if g.is_sparse
                         else g).reshape(-1) for p, g in pairs if p.dtype == dt]).cpu()
             for dt in dtypes]
    meta = torch.tensor([float(g is not None) for _, g in pairs] + [float(layout)],
                        dtype=torch.float64)
    core.dp_sum(flats + [meta])
    if meta[-1].item() != dp * layout:
        raise ValueError("dp: the replicas train different parameters (the same number of "
                         "values, but not the same ones); every replica must freeze and unfreeze "
                         "alike")
    parts = {dt: iter(f.to(device).split([p.numel() for p, _ in pairs if p.dtype == dt]))
             for dt, f in zip(dtypes, flats)}
    return [(p, None if not n else s.view_as(p) if p.grad is None else p.grad + s.view_as(p))
            for (p, _), s, n in zip(pairs, (next(parts[p.dtype]) for p, _ in pairs),
                                    meta[:-1].tolist())]
