"""A checkpoint's optimizer state: the optimizer's state_dict with its parameters named, so
that any layout (another pp, vpp or process count) finds its own, and what an optimizer loads
of it, matched group by group."""
import copy

import torch

from ._model_state import some_of


def _names(chunks, canonical):
    """id(parameter) -> its name; a parameter that several chunks share, by its first, and one
    tied across processes by its tie's first (`canonical`), which every copy shares, so that
    each layout finds its optimizer state."""
    names = {}
    for c in sorted(chunks):
        for name, p in chunks[c].named_parameters():
            names.setdefault(id(p), canonical.get(id(p), f"{c}.{name}"))
    return names


def elsewhere(model, chunks):
    """{id: chunk index} of the parameters of the chunks in `model` (every chunk, where the
    pipeline was given them as a list; None otherwise) that other processes run: an optimizer
    built over every chunk's parameters holds them, and they never get a gradient here."""
    own = {id(p) for c in chunks.values() for p in c.parameters()}
    return {id(p): c for c, m in sorted((model or {}).items()) if c not in chunks
            for p in m.parameters() if id(p) not in own}


def optimizer_state(chunks, optimizer, canonical, others=None):
    """The optimizer's state_dict with every parameter named instead of numbered; the
    parameters of `others` (elsewhere()) are their processes' to save, and left out with what
    state they have here (an Adagrad makes one for each as it is built)."""
    names = _names(chunks, canonical)
    sd = optimizer.state_dict()
    params = _own_params(optimizer, names, others)
    state = {names[id(params[i])]: s for i, s in sd["state"].items() if id(params[i]) in names}
    groups = []
    for g, saved in zip(optimizer.param_groups, sd["param_groups"]):
        entry = {k: v for k, v in saved.items() if k != "params"}
        entry["params"] = [names[id(p)] for p in g["params"] if id(p) in names]
        groups.append(entry)
    return {"state": state, "param_groups": groups, "type": optimizer_type(optimizer)}


def optimizer_type(optimizer):
    """The optimizer's class, as a checkpoint names it ("torch.optim.adam.Adam")."""
    kind = type(optimizer)
    return f"{kind.__module__}.{kind.__qualname__}"


def _refuse_other_type(named, optimizer, mine_named):
    """Each optimizer type keeps its own state and hyper-parameters: an SGD's state loaded into
    an Adam failed in torch with a bare KeyError ('step'), an Adam's into an SGD loaded and
    failed at the first step (no 'momentum'), and an AdamW's into an Adam took its
    weight_decay as L2, silently. Compared for the parameters `optimizer` holds (their names),
    each by the optimizer that saved it (a process per stage saves its own: "types"), or by
    the one of an optimizer_state ("type"); a checkpoint saved before types were kept names
    none."""
    mine = optimizer_type(optimizer)
    types = named.get("types") or {}
    saved = {types.get(n, named.get("type")) for n in mine_named} - {None, mine}
    if saved:
        other = sorted(saved)[0]
        raise ValueError(f"optimizer: the checkpoint holds the state of a {other}, this "
                         f"optimizer is a {mine}: load it into {_a(other.rsplit('.', 1)[-1])}, or "
                         "load without an optimizer")


def _own_params(optimizer, names, others):
    """The optimizer's parameters in order, refused (ValueError) unless each is one of this
    process's chunks' (`names`: theirs by id) or of a chunk another process runs (`others`)."""
    params = [p for g in optimizer.param_groups for p in g["params"]]
    unknown = [i for i, p in enumerate(params) if id(p) not in names and id(p) not in
               (others or {})]
    if unknown:
        raise ValueError("optimizer: it holds parameters that are not this pipeline's chunks' "
                         f"(positions {unknown[:5]}); save and load keep the state of the "
                         "parameters of pipe.chunks (and of the other processes' chunks, where "
                         "the chunks were given as a list): build the optimizer over those, "
                         "and keep another parameter's state in an extra of the save")
    return params


def optimizer_load_state(chunks, optimizer, named, canonical, others=None):
    """What `optimizer` (over this process's parameters, and those of `others`: elsewhere())
    loads of `named` (optimizer_state of any layout), made and checked without changing it: its
    load_state_dict argument. Each group takes the hyper-parameters of the saved group(s) that
    held its parameters (_saved_group); the parameters of `others` take no state."""
    names = _names(chunks, canonical)
    params = _own_params(optimizer, names, others)  # before a foreign one's lookup failed
    _refuse_other_type(named, optimizer, [names[id(p)] for p in params if id(p) in names])
    group_of = {}
    for g in named["param_groups"]:
        for n in g["params"]:
            group_of[n] = g
    state, groups, index = {}, [], 0
    for i, g in enumerate(optimizer.param_groups):
        saved = _saved_group(i, [names[id(p)] for p in g["params"] if id(p) in names],
                             group_of)
        entry = {k: v for k, v in (saved or g).items() if k != "params"}
        entry["params"] = list(range(index, index + len(g["params"])))
        for p in g["params"]:
            n = names.get(id(p))
            if n in named["state"]:
                # Its own copy: two copies of a tie in one process share a name, and one state
                # stepped for both would move them apart.
                state[index] = copy.deepcopy(named["state"][n])
            index += 1
        groups.append(entry)
    return {"state": state, "param_groups": groups}


def _saved_group(i, group_names, group_of):
    """The saved group whose hyper-parameters param group `i` (its parameters' names) takes,
    None for an empty one. Matched by parameter, as layouts cut groups differently (a group
    saved by several processes is one in each part, with the same hyper-parameters). Taken
    from its first parameter alone, parameters the saved optimizer never held, or held in
    another group, took that group's lr silently: ValueError, as torch's load raises."""
    missing = [n for n in dict.fromkeys(group_names) if n not in group_of]
    if missing:
        raise ValueError(
            f"optimizer: its param group {i} holds parameters the checkpoint's optimizer did "
            f"not hold: {some_of(repr(n) for n in missing)}; load into an optimizer over the "
            "saved parameters, then add the others with add_param_group")
    first = group_names[0] if group_names else None
    for n in group_names[1:]:
        key = _other_setting(group_of[first], group_of[n])
        if key is not None:
            raise ValueError(
                f"optimizer: its param group {i} mixes parameters of saved groups whose "
                f"hyper-parameters differ: {first!r} was saved with "
                f"{key}={_setting(group_of[first], key)}, {n!r} with "
                f"{key}={_setting(group_of[n], key)}; give each saved group's parameters a "
                "group of their own")
    return group_of.get(first)


def _other_setting(a, b):
    """The first hyper-parameter on which saved groups `a` and `b` differ, or None."""
    if a is b:
        return None
    for key in list(a) + [k for k in b if k not in a]:
        if key != "params" and (key not in a or key not in b or not _same(a[key], b[key])):
            return key
    return None


def _same(x, y):
    """Whether two saved hyper-parameters are equal: tensors (a capturable lr) by dtype, shape
    and values, tuples (Adam's betas) item by item."""
    if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
        return (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and
                x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y))
    if isinstance(x, (list, tuple)) or isinstance(y, (list, tuple)):
        return (isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)) and
                len(x) == len(y) and all(_same(a, b) for a, b in zip(x, y)))
    return bool(x == y)


def _setting(group, key):
    return repr(group[key])[:40] if key in group else "nothing"


def _a(name):
    """`name` with its article: "an AdamW", "a SGD"."""
    return ("an " if name[:1] in "AEIOUaeiou" else "a ") + name
