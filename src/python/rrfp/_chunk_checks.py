"""What a pipeline's chunks cannot hold: a data-parallel wrapper, a lazy parameter not
initialized yet."""
import torch


def _wrappers():
    import sys
    wrappers = [torch.nn.parallel.DistributedDataParallel]
    fsdp = sys.modules.get("torch.distributed.fsdp")  # a chunk wrapped in it imported it
    if fsdp is not None and hasattr(fsdp, "FullyShardedDataParallel"):
        wrappers.append(fsdp.FullyShardedDataParallel)
    return tuple(wrappers)


def _never_runs(said):
    return ValueError(
        f"chunks: {said}, whose gradient all-reduce never runs in a pipeline's backward "
        "(autograd.grad accumulates nothing), so its replicas would train apart; pass the "
        "module itself and Pipeline(..., dp=N) for data parallelism")


def refuse_data_parallel_wrappers(c, module):
    """A chunk wrapped in DistributedDataParallel (or FSDP) would train each replica on its own:
    their all-reduce runs from hooks on the gradients' accumulation into .grad, and a stage
    computes gradients with autograd.grad, which never accumulates, so the replicas would
    silently drift apart. Refused, naming the pipeline's own data parallelism."""
    for name, sub in module.named_modules():
        if isinstance(sub, _wrappers()):
            where = f" (at '{name}')" if name else ""
            raise _never_runs(f"chunk {c} holds a {type(sub).__name__}{where}")


def refuse_wrapped_since(chunks):
    """The same wrapper made around a chunk (or a part of one) outside the pipeline, after it
    was built or around the module it was split from, which the construction's check could not
    see: the replicas trained apart without a word. `chunks`: chunk index -> module, the chunks
    this process runs (Pipeline.chunks). Looked for once, at a pipeline's first step, among
    every object the collector tracks."""
    import gc
    owner = {id(sub): c for c, chunk in chunks.items() for sub in chunk.modules()}
    kinds = _wrappers()
    for o in gc.get_objects():
        # By its type alone: isinstance() reads __class__, which a proxy may answer by raising.
        if issubclass(type(o), kinds) and id(getattr(o, "module", None)) in owner:
            raise _never_runs(f"chunk {owner[id(o.module)]} is wrapped in a "
                              f"{type(o).__name__} made outside the pipeline")


def refuse_lazy_parameters(c, module):
    """A lazy module (nn.LazyLinear, say) draws its initial weights from torch's generator at its
    first forward, in the order chunks first run: a pipeline's stages do not run them in a plain
    loop's order (as threads, not even in one order from run to run), so the model would start
    from other weights, silently. Refused: initialize it with one forward first. A lazy buffer
    alone (nn.LazyBatchNorm1d(affine=False)) draws nothing, but load() and load_state_dict()
    could not fill it before that forward (torch's error on its shape): refused alike."""
    from torch.nn.parameter import UninitializedBuffer, UninitializedParameter
    lazy = [(n, "parameter") for n, p in module.named_parameters()
            if isinstance(p, UninitializedParameter)]
    lazy += [(n, "buffer") for n, b in module.named_buffers() if isinstance(b, UninitializedBuffer)]
    if lazy:
        name, what = lazy[0]
        raise ValueError(
            f"chunks: chunk {c} has a {what} not initialized yet ('{name}', a lazy module's), "
            "which takes its shape (and a parameter its initial values) at the chunk's first "
            "forward, in an order a plain loop does not share; run the model (or the chunk) "
            "once on a sample batch before building the pipeline")
