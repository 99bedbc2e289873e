"""The batch a step is given: split into microbatches, and checked before any task runs (no
gradient expected from the inputs or targets, the same batch on every process of a replica)."""
import zlib

import torch


def digest(microbatches, found):
    """A CRC-32 over the microbatches' types and tensors (`found`: each one's, wherever they
    sit in it; their shapes, dtypes and bytes), the same in every process that holds the same
    batch."""
    crc = 0
    for mb, tensors in zip(microbatches, found):
        crc = zlib.crc32(repr(type(mb)).encode(), crc)
        for x in tensors:  # a tuple's or a dict's tensors too, not only a tensor's
            crc = zlib.crc32(f"{tuple(x.shape)}{x.dtype}".encode(), crc)
            crc = zlib.crc32(x.detach().cpu().contiguous().numpy().tobytes()
                             if x.dtype != torch.bfloat16 else
                             x.detach().cpu().contiguous().view(torch.int16).numpy().tobytes(),
                             crc)
    return crc


def refuse_grad_outside(found, name, instead):
    """A plain loop's backward goes on from the inputs and targets into whatever graph made
    them (an encoder outside the pipeline, a leaf that wants its gradient); a step's backward
    ends at the chunks, so such a gradient would silently be missing: refused instead.
    `found`: each microbatch's tensors."""
    for mb, tensors in enumerate(found):
        if any(t.requires_grad for t in tensors):
            raise ValueError(
                f"{name}: microbatch {mb} holds a tensor that requires grad; a step's backward "
                f"ends at the chunks' parameters and does not reach the {name} or what computed "
                f"them, where a plain loop's would: pass them detached (.detach()), or compute "
                f"them {instead}")


def split(batch, m, name):
    if isinstance(batch, (list, tuple)):
        if len(batch) != m:
            raise ValueError(f"{name}: expected {m} microbatches, got {len(batch)}")
        return list(batch)
    if isinstance(batch, torch.Tensor):
        rows = 0 if batch.dim() == 0 else batch.shape[0]
        if rows < m or rows % m:
            raise ValueError(f"{name}: a batch of {rows} rows does not split evenly into {m} "
                             f"microbatches; give a list of {m} microbatches to choose their "
                             "sizes")
        return list(torch.tensor_split(batch, m))
    raise TypeError(f"{name}: expected a tensor or a list of {m} microbatches, "
                    f"got {type(batch).__name__}")
