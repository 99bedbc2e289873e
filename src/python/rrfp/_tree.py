"""Structures between chunks: a chunk's output of nested tuples, lists and dicts travels as
its tensors and a pickled description of the rest; its gradients come back the same way."""
import pickle

import torch
from torch.utils import _pytree as pytree


def pack(obj, what):
    """A structure of tuples, lists and dicts as (bytes, tensors): the tensors travel as tensors,
    the nesting and any other leaf (numbers, strings, None) as pickled bytes."""
    leaves, spec = pytree.tree_flatten(obj)
    mask = [isinstance(x, torch.Tensor) for x in leaves]
    try:
        structure = pickle.dumps((spec, [None if m else x for x, m in zip(leaves, mask)], mask))
    except Exception as e:
        raise TypeError(f"{what} returned a {type(obj).__name__} whose non-tensor parts cannot "
                        f"be sent to the next chunk: {e}") from e
    return structure, [x for x, m in zip(leaves, mask) if m]


def unpack(structure, tensors):
    spec, consts, mask = pickle.loads(structure)
    it = iter(tensors)
    return pytree.tree_unflatten([next(it) if m else c for c, m in zip(consts, mask)], spec)


def pack_grads(grads):
    """Gradients for a structure's tensors, None where none goes: which are there, and those."""
    return pickle.dumps([g is not None for g in grads]), [g for g in grads if g is not None]


def unpack_grads(g):
    present = pickle.loads(g[0])
    it = iter(g[1])
    return [next(it) if p else None for p in present]
