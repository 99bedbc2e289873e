"""What data-parallel replicas keep equal besides their summed gradients: the first replica's
parameters when the pipeline is built, and its buffers after every step, as
DistributedDataParallel broadcasts them from rank 0. Without it, replicas whose chunks were
initialised apart (a script that seeds by rank, or not at all) trained apart silently, and
batch norm's running statistics, which each replica updates from its own microbatches,
differed from replica to replica: the same evaluation gave other outputs on each."""
import torch

from . import _wire


def _entries(chunks, params):
    """((chunk, name), tensor) of this process's chunks: buffers, and parameters if asked."""
    out = []
    for c in sorted(chunks):
        if params:
            out += [((c, n), p) for n, p in chunks[c].named_parameters()]
        out += [((c, n), b) for n, b in chunks[c].named_buffers()]
    return out


def from_first_replica(core, chunks, params):
    """Copies the first replica's buffers (and parameters, with `params`) of this process's
    chunks into every other replica's, bit for bit. A collective over each stage's replicas:
    every process of the job calls it alike. Nothing to do with one replica."""
    if core.world == 1:
        return
    entries = _entries(chunks, params)
    first = core.replica == 0
    # Only the first replica's state travels: the others send an empty list.
    every = core.dp_all_gather(_wire.pack(entries if first else []))
    if first or len(every) == 1:
        return
    theirs = dict(_wire.unpack(every[0]))
    mine = dict(entries)
    if theirs.keys() != mine.keys():
        missing = sorted(theirs.keys() - mine.keys()) + sorted(mine.keys() - theirs.keys())
        c, name = missing[0]
        raise ValueError(f"replica {core.replica}: chunk {c}'s '{name}' is "
                         + ("missing here" if (c, name) in theirs else "missing in replica 0")
                         + "; every replica must build the same chunks")
    with torch.no_grad():
        for key, t in mine.items():
            src = theirs[key]
            if src is None or t is None:
                continue
            if src.shape != t.shape or src.dtype != t.dtype:
                raise ValueError(f"replica {core.replica}: chunk {key[0]}'s '{key[1]}' is "
                                 f"{t.dtype} {tuple(t.shape)} here but {src.dtype} "
                                 f"{tuple(src.shape)} in replica 0; every replica must build "
                                 "the same chunks")
            t.copy_(src)
