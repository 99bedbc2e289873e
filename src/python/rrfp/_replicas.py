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
    each buffer of this process's owners (replicated) as ((owner, name), kind, shape),
    picklable; the kind is its dtype, and its layout where that is not dense (_kind)."""
    return [(key, _kind(b), tuple(b.shape)) for key, b in _entries(owners, False)
            if b is not None]


_UNSENDABLE = " (which replica 0 cannot send to the others)"


def _kind(t):
    """A buffer's dtype, with its layout where it is not a dense one: a buffer dense in one
    replica and sparse in another passed the closing exchange and failed the copy on one
    process alone. A layout _portable cannot carry is marked _UNSENDABLE."""
    if t.layout == torch.sparse_coo:
        return f"{t.dtype} sparse"
    if t.layout != torch.strided or t.is_quantized or t.is_meta:
        what = "quantized" if t.is_quantized else "meta" if t.is_meta else str(t.layout)
        return f"{t.dtype} {what}{_UNSENDABLE}"
    return str(t.dtype)


def refuse_other_buffers(every, pp, call):
    """Refuses, on every process alike, buffers that replica 0's could not be copied into:
    `every` is every job rank's buffer_signature (job rank r is replica r // pp, stage r % pp),
    learnt in the step's closing exchange, which every process makes. Checked before any .grad
    is written and any buffer copied (from_first_replica), the step is then dropped everywhere.
    Before, only the other replicas' processes of the chunk's stage compared shapes, after
    their .grad was written and some buffers copied, while replica 0's processes returned: the
    replicas went on training apart, silently. A buffer replica 0 cannot send (a layout other
    than dense or sparse COO) is refused likewise: its processes alone raised, the others'
    step went on."""
    for r, signature in enumerate(every):
        bad = next(((key, kind) for key, kind, _ in signature if kind.endswith(_UNSENDABLE)),
                   None)
        if bad is not None:
            (c, name), kind = bad
            raise ValueError(
                f"dp: after {call}, {_owner(c)}'s buffer '{name}' in replica {r // pp} is "
                f"{kind}; the replicas take replica 0's buffers after each step, which travel "
                "dense or sparse (COO); refused on every process before any .grad was written "
                "or buffer copied")
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
    """A buffer_signature as {(owner, name): (kind, shape)}."""
    return {key: (kind, shape) for key, kind, shape in signature}


def from_first_replica(core, owners, params, lenient=False):
    """Copies the first replica's buffers (and the chunks' parameters, with `params`) of this
    process's owners (replicated) into every other replica's, bit for bit. A collective over
    each stage's replicas: every process of the job calls it alike. Nothing to do with one
    replica. After a step the replicas' buffers were checked already on every process
    (refuse_other_buffers); the check here is for the parameters at construction, which the
    caller tells every process (agreed). Every entry is checked before any is copied, so a
    refusal copies nothing. `lenient` (after a step that failed or was refused, whose forwards
    may have left a buffer sized by its batch, or not yet made one): copies the entries that
    match, skipping the others, which the next step's closing exchange compares again."""
    if core.world == 1:
        return
    entries = _entries(owners, params)
    first = core.replica == 0
    refusal, payload = None, _wire.pack([])  # the others send an empty list
    if first:
        try:
            payload = _wire.pack(_portable(entries))
        except (ValueError, RuntimeError) as e:  # told to the others: they wait for it
            refusal = ValueError(f"dp: replica 0 cannot send its state to the other replicas: "
                                 f"{e}")
            payload = _wire.pack([((_REFUSED, str(refusal)), None)])
    every = core.dp_all_gather(payload)
    if refusal is not None:
        raise refusal
    if first or len(every) == 1:
        return
    theirs = _restored(_wire.unpack(every[0]))
    if _REFUSED in theirs:
        raise ValueError(theirs[_REFUSED])
    mine = dict(entries)
    pairs = [(t, theirs[key]) for key, t in mine.items() if t is not None and
             theirs.get(key) is not None and _alike(t, theirs[key])]
    if not lenient:
        _refuse_unlike(core.replica, mine, theirs)
    with torch.no_grad():
        for t, src in pairs:
            t.copy_(src)


_REFUSED = "refused"  # the label of replica 0's refusal, in place of its state


def _refuse_unlike(replica, mine, theirs):
    """Raises where this replica's entries and replica 0's differ in names, shapes or dtypes."""
    if theirs.keys() != mine.keys():
        missing = (sorted(theirs.keys() - mine.keys(), key=_key_order)
                   + sorted(mine.keys() - theirs.keys(), key=_key_order))
        c, name = missing[0]
        raise ValueError(f"replica {replica}: {_owner(c)}'s '{name}' is "
                         + ("missing here" if (c, name) in theirs else "missing in replica 0")
                         + "; every replica must build the same chunks and loss_fn")
    for key, t in mine.items():
        src = theirs[key]
        if src is not None and t is not None and not _alike(t, src):
            raise ValueError(f"replica {replica}: {_owner(key[0])}'s '{key[1]}' is "
                             f"{t.dtype} {tuple(t.shape)} here but {src.dtype} "
                             f"{tuple(src.shape)} in replica 0; every replica must build "
                             "the same chunks and loss_fn")


def _alike(t, src):
    """Whether replica 0's `src` can be copied into `t`: the kind and shape the closing exchange
    compares (buffer_signature)."""
    return t.shape == src.shape and _kind(t) == _kind(src)


def _portable(entries):
    """entries as _wire.pack takes them: a sparse (COO) tensor as its indices and values, its
    label marked with its size (packing read its memory as a dense tensor's and failed on
    replica 0 alone, the others waiting for it until the timeout)."""
    out = []
    for key, t in entries:
        if t is not None and t.layout == torch.sparse_coo:
            t = t.detach().coalesce()
            out += [((_SPARSE, key, tuple(t.shape), "i"), t.indices()),
                    ((_SPARSE, key, tuple(t.shape), "v"), t.values())]
        else:
            out.append((key, t))
    return out


_SPARSE = "sparse"


def _restored(unpacked):
    """_portable's entries back, by key: a sparse tensor from its indices and values."""
    out, parts = {}, {}
    for label, t in unpacked:
        if label[0] == _SPARSE:
            parts.setdefault((label[1], label[2]), {})[label[3]] = t
        elif label[0] == _REFUSED:
            out[_REFUSED] = label[1]
        else:
            out[label] = t
    for (key, shape), p in parts.items():
        # Coalesced as replica 0's was (_portable): its copy into a buffer marked otherwise
        # left indices() raising on the other replicas alone.
        out[key] = torch.sparse_coo_tensor(p["i"], p["v"], shape)._coalesced_(True)
    return out


def copy_if_apart(pipe, apart, call):
    """Before a step (`call`), where check_before_step found any process's buffers apart from
    replica 0's (`apart`: a step that failed, or was refused after its forwards, leaves each
    replica's as its own forwards left them), copies replica 0's into every replica on every
    process, those alike in shape and dtype (lenient), a refusal told to all. A failed step's
    replicas kept their own running statistics, and an eval_step after it gave other outputs
    on each replica, until a step succeeded. Cleared even where it fails: a step refused for
    good after one that failed would leave the pipeline unable to step again."""
    try:
        if apart:
            agreed(pipe._core,
                   lambda: from_first_replica(pipe._core, replicated(pipe), False, lenient=True),
                   f"{call}: process(es) {{bad}} could not take replica 0's buffers after a "
                   "failed step; their own errors say why", call_of(pipe, call))
    finally:
        pipe._buffers_apart = False


def settle_buffers(pipe):
    """After a step or an evaluation (dp > 1): replica 0's buffers into every replica (checked
    already in the step's closing exchange), and the replicas are alike again. Until then a
    step's forwards may have left them apart (pipe._buffers_apart, set as the step begins)."""
    from_first_replica(pipe._core, replicated(pipe), False)
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
