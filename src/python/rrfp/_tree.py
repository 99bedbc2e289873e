"""Structures between chunks: a chunk's output of nested tuples, lists, dicts, dataclasses or
any other picklable objects travels as its tensors and a pickled description of the rest; its
gradients come back the same way.

The description is pickled with every tensor, wherever it sits, replaced by its place in the
list of tensors that travel (pickle's persistent ids). So a tensor inside an object that torch's
pytree does not open (a dataclass, a model-output class, an object of the user's own) still
travels as a tensor, becomes a leaf that wants its gradient on the receiving side, and carries
that gradient back; pickled inside the description, as when the structure was flattened with
pytree alone, it lost its graph and its earlier chunks silently got no gradient from it."""
import io
import pickle

import torch
import torch.utils._pytree as _pytree


_PLAIN = (torch.Tensor, torch.nn.Parameter)


class SubclassRefused(TypeError):
    pass


def refuse_subclass(t, what):
    """A tensor of a subclass of torch.Tensor arrives as a plain tensor (its __torch_function__
    and attributes left behind: a subclass that halves its sums summed twice as much on the next
    chunk, silently): refused by name."""
    if type(t) not in _PLAIN:
        raise SubclassRefused(
            f"{what} returned a {type(t).__name__}, a subclass of torch.Tensor, which would reach "
            "the next chunk as a plain tensor, without its class's behaviour; return a plain "
            "tensor (t.as_subclass(torch.Tensor)), or keep the class's work in the chunk that "
            "makes it")


class _Pickler(pickle.Pickler):
    def __init__(self, file, what, plain_only):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.what, self.plain_only = what, plain_only
        self.tensors = []
        self.places = {}  # id(tensor) -> its place in self.tensors

    def persistent_id(self, obj):
        if isinstance(obj, torch.Tensor):
            # One tensor met twice (returned as "hidden" and as "residual", say) travels once
            # and arrives as one leaf, whose gradients then add in one buffer in the order the
            # backward reaches its uses, as a plain loop's do. As two leaves, each with its own
            # sum added at the sender, the bits differed from the loop's.
            at = self.places.get(id(obj))
            if at is None:
                if self.plain_only:
                    refuse_subclass(obj, self.what)
                at = self.places[id(obj)] = len(self.tensors)
                self.tensors.append(obj)
            return at
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, tensors):
        super().__init__(file)
        self.tensors = tensors

    def persistent_load(self, pid):
        return self.tensors[pid]


class _Describer(_Pickler):
    """pack's pickler for describe(): a set's members in a fixed order, their own descriptions
    sorted, where pickle writes them in the order of their hashes, which for strings differs
    from process to process. (The persistent id, a tuple of bytes, is pickled in its place.)"""

    def persistent_id(self, obj):
        if type(obj) in (set, frozenset):
            return (type(obj).__name__, tuple(sorted(describe(x) for x in obj)))
        return super().persistent_id(obj)


def _pickled(obj, what, plain_only, pickler_class=_Pickler):
    """`obj` pickled with each tensor as its place, and the tensors; TypeError where it cannot
    be pickled."""
    file = io.BytesIO()
    pickler = pickler_class(file, what, plain_only)
    try:
        pickler.dump(obj)
    except SubclassRefused:
        raise
    except Exception as e:
        raise TypeError(f"{what} returned a {type(obj).__name__} whose non-tensor parts cannot "
                        f"be sent to the next chunk: {e}") from e
    return file.getvalue(), pickler.tensors


def pack(obj, what, plain_only=True):
    """A structure as (bytes, tensors): the tensors in the order pickling first meets them (one
    met again is the same entry), the rest
    (nesting, numbers, strings, None, objects) pickled, after which of the tensors want a
    gradient (wants_grad). `what` names the sender in errors; plain_only: a tensor subclass is
    refused (refuse_subclass), as a message between chunks must (a search for the tensors, or
    inputs moved to a device, take them)."""
    description, tensors = _pickled(obj, what, plain_only)
    return pickle.dumps([t.requires_grad for t in tensors]) + description, tensors


def describe(obj):
    """What `obj` holds besides its tensors' values, as bytes equal in every process that holds
    an equal `obj`: its pickle with each tensor as its place (NumPy arrays, numbers, strings,
    nesting and classes; a set's members sorted). Where it cannot be pickled (a lambda in it),
    the structure pytree's walk finds and each leaf's description, or its type's name where
    that leaf cannot be pickled either. The batch digest compares it between processes: the
    tensors alone let NumPy or list targets that differed train silently."""
    try:
        return _pickled(obj, "", False, _Describer)[0]
    except TypeError:
        pass
    leaves, spec = _pytree.tree_flatten(obj)
    if len(leaves) == 1 and leaves[0] is obj:  # a leaf pytree does not open
        return f"unpicklable {type(obj).__module__}.{type(obj).__qualname__}".encode()
    return repr(spec).encode() + b"".join(
        b"tensor" if isinstance(x, torch.Tensor) else describe(x) for x in leaves)


def wants_grad(structure):
    """Which of a packed structure's tensors wanted a gradient where they were made: only those
    become leaves that want one on the receiving side, so a tensor that wanted none (a mask in
    floating point, positions, a frozen part's output) costs no backward there."""
    return pickle.load(io.BytesIO(structure))


def unpack(structure, tensors):
    file = io.BytesIO(structure)
    pickle.load(file)  # wants_grad's list
    return _Unpickler(file, tensors).load()


def tensors_in(obj):
    """Every tensor in `obj`, wherever it sits (as pack finds them); where obj cannot be
    pickled (a lambda, a lock in it), those pytree's walk opens (tuples, lists, dicts, named
    tuples), as to_device finds them. [] there switched off the step's checks of the batch:
    its rows, its tensors that want a gradient, and the digest the processes compare."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    try:
        return pack(obj, "", plain_only=False)[1]
    except TypeError:  # pack's refusal of what cannot be pickled
        return [x for x in _pytree.tree_flatten(obj)[0] if isinstance(x, torch.Tensor)]


def pack_grads(grads):
    """Gradients for a structure's tensors, None where none goes: which are there, and those."""
    return pickle.dumps([g is not None for g in grads]), [g for g in grads if g is not None]


def unpack_grads(g):
    present = pickle.loads(g[0])
    it = iter(g[1])
    return [next(it) if p else None for p in present]
