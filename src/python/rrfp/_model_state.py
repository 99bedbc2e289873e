"""A pipeline's model state by chunk: model_state names each entry "c.name" after the chunk
it belongs to (with torch's version metadata of each module), check_model_state checks a state
against the chunks before anything is loaded, and apply_model_state loads it, all or nothing."""
import collections
import contextlib
import copy
import itertools

import torch

try:
    from torch.ao.quantization import FakeQuantizeBase as _FakeQuantizeBase
    from torch.ao.quantization import ObserverBase as _ObserverBase
    _RESIZED_ON_LOAD = (_ObserverBase, _FakeQuantizeBase)
except ImportError:  # a torch without them: nothing to resize
    _RESIZED_ON_LOAD = ()


def model_state(chunks):
    """{"c.name": tensor} over `chunks` ({index: module}): parameters and buffers, with torch's
    version metadata of each module (its _metadata, by "c.prefix"), as a module's state_dict
    carries it: some modules load by it (an observer saved without it loaded as an old
    version, its eps replaced by the default, silently)."""
    out, meta = collections.OrderedDict(), {}
    for c in sorted(chunks):
        state = chunks[c].state_dict()
        for name, value in state.items():
            out[f"{c}.{name}"] = value
        for prefix, entry in (getattr(state, "_metadata", None) or {}).items():
            meta[f"{c}.{prefix}" if prefix else str(c)] = entry
    out._metadata = meta
    return out


def metadata_of(state):
    """The version metadata `state` carries (model_state), or None: a dict of dicts by module
    prefix, anything else (a file's damaged or foreign field) left out."""
    meta = getattr(state, "_metadata", None)
    if not isinstance(meta, dict):
        return None
    return {k: v for k, v in meta.items() if isinstance(k, str) and isinstance(v, dict)}


def _chunk_metadata(meta, c):
    """Chunk c's share of model_state's metadata, by the chunk's own prefixes."""
    head, out = str(c), {}
    for key, entry in meta.items():
        if key == head:
            out[""] = entry
        elif key.startswith(head + "."):
            out[key[len(head) + 1:]] = entry
    return out


def some_of(names, shown=5):
    """The first `shown` of `names` and how many more: a message stays short whatever a
    checkpoint holds."""
    names = [str(n) for n in names]
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _chunk_of(key, n_chunks):
    """The chunk index `key` ("c.name") names, or None (no chunk of n_chunks)."""
    if not isinstance(key, str):
        return None
    c = key.partition(".")[0]
    # ASCII digits alone (isdigit() takes "\u00b2", which int() refuses), and few of them
    # (int() refuses thousands of digits).
    if not (0 < len(c) <= 9 and c.isascii() and c.isdigit()) or int(c) >= n_chunks:
        return None
    return int(c)


def _chunks_beyond(keys, n_chunks):
    """The largest chunk index that `keys` name where every one of them names a chunk past
    n_chunks - 1 ("c.name", c a few ASCII digits); None otherwise."""
    found = []
    for key in keys:
        c = key.partition(".")[0] if isinstance(key, str) else ""
        if not (0 < len(c) <= 9 and c.isascii() and c.isdigit() and "." in key):
            return None
        found.append(int(c))
    return max(found) if found and min(found) >= n_chunks else None


def check_model_state(chunks, n_chunks, state, strict, keys=None):
    """What `state` holds for `chunks` ({index: module}), by chunk ({c: {name: value}}), checked
    against them before any of it is loaded, so that a refused state changes nothing (loaded
    chunk by chunk, a bad chunk was found after the ones before it had been overwritten).
    Entries of chunks elsewhere are skipped. strict: an entry of no chunk at all, or a chunk
    missing one of its own or holding one it has not, raises KeyError. An entry of another
    shape or dtype than the chunk's raises ValueError (torch's copy would cast another dtype,
    silently: no longer the values saved), and one that is not a tensor where the chunk has one
    TypeError. `keys`, a
    dict: its "missing" and "unexpected" get this process's missing and unexpected entries by
    their full names ("c.name"), as torch's load_state_dict returns them."""
    per_chunk, stray = {}, []
    for key, value in state.items():
        c = _chunk_of(key, n_chunks)
        if c is None:
            stray.append(key)
        else:
            per_chunk.setdefault(c, {})[key.partition(".")[2]] = value
    if strict and stray:
        # The usual causes said: a pipeline cut into more chunks, and the unsplit model's own
        # state, whose first names ("0.weight" of a Sequential) can read as chunks and were not
        # named with the rest.
        beyond = _chunks_beyond(stray, n_chunks)
        what = (f"chunks up to {beyond} where this pipeline has {n_chunks} (0..{n_chunks - 1}): "
                "a pipeline's state loads into one cut into the same chunks (on any layout); "
                if beyond is not None else
                f"no chunk (expected 'c.name' with c in 0..{n_chunks - 1}); ")
        raise KeyError(f"state_dict: {some_of([repr(k) for k in stray])} "
                       f"{'names' if len(stray) == 1 else 'name'} {what}a state of "
                       "the model before it was split names its own modules, not the chunks "
                       "(load it into that model before splitting, or save the pipeline's "
                       "state_dict)")
    out = _Checked(strict, keys)
    for c in sorted(chunks):
        got = per_chunk.get(c, {})
        own = chunks[c].state_dict(keep_vars=True)
        if _renames_on_load(chunks[c]):
            # A load pre-hook may rename entries (an old name migrated to a new one): the
            # names are compared after it has run, by torch's load (apply_model_state).
            out.keys_by_torch.add(c)
        else:
            missing = [k for k in own
                       if k not in got and not _filled_by_torch(chunks[c], k, state)]
            unexpected = [k for k in got if k not in own]
            _note_keys(keys, c, missing, unexpected)
            if strict and (missing or unexpected):
                _refuse_keys(c, missing, unexpected, _held(c, got, per_chunk, chunks, n_chunks))
        bad = [b for b in (_entry_problem(chunks[c], c, name, value, own.get(name))
                           for name, value in got.items()) if b]
        if bad:
            raise ValueError(f"state_dict: chunk {c}: {some_of(bad, 3)}")
    if keys is not None:
        keys.setdefault("unexpected", []).extend(stray)
    meta = metadata_of(state)
    for c in chunks:
        out[c] = collections.OrderedDict(per_chunk.get(c, {}))
        if meta is not None:  # torch's load_state_dict reads each module's version from it
            out[c]._metadata = _chunk_metadata(meta, c)
    return out


def _entry_problem(chunk, c, name, value, mine):
    """What is wrong with `value` as entry `name` of chunk `c`, whose own is `mine`, or None:
    another shape, dtype or layout (raises TypeError where it is no tensor)."""
    if not isinstance(mine, torch.Tensor):
        return None  # an unexpected entry (not strict: skipped, as torch skips it)
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"state_dict: chunk {c}: '{c}.{name}' is a "
                        f"{type(value).__name__}, not a tensor")
    if value.shape != mine.shape and not _resized_by_torch(chunk, name):
        return f"'{c}.{name}' has shape {list(value.shape)}, the chunk's {list(mine.shape)}"
    if value.dtype != mine.dtype:
        return (f"'{c}.{name}' is {value.dtype}, the chunk's {mine.dtype} (convert the state "
                "or the model first if that is meant)")
    if value.layout != mine.layout or (value.is_meta and not mine.is_meta):
        # torch's copy refused them partway through the load, the chunks before this one
        # already overwritten.
        what = "on the meta device (no values)" if value.layout == mine.layout else \
            f"{value.layout}, the chunk's {mine.layout}"
        return f"'{c}.{name}' is {what}"
    return None


class _Checked(dict):
    """check_model_state's result: each chunk's state ({c: {name: value}}), and what the load
    still checks: the names of the chunks in keys_by_torch (_renames_on_load), under `strict`,
    noted in `noted` (check_model_state's `keys`)."""

    def __init__(self, strict, noted):
        super().__init__()
        self.strict, self.noted, self.keys_by_torch = strict, noted, set()


def _note_keys(keys, c, missing, unexpected):
    if keys is not None:
        keys.setdefault("missing", []).extend(f"{c}.{k}" for k in missing)
        keys.setdefault("unexpected", []).extend(f"{c}.{k}" for k in unexpected)


def _held(c, got, per_chunk, chunks, n_chunks):
    """What a state refused at chunk `c` holds, where that tells its likely cause: no entry of
    the chunk, or none of other chunks of the model (a state of the model cut into fewer chunks
    gave chunk 3 of 8 the names of chunk 3 of 4, told only as names missing and unexpected)."""
    if not per_chunk:
        return f"; it holds no entry of any of this model's {n_chunks} chunks"
    if not got:
        return (f"; it holds no entry of chunk {c} (its chunks: {some_of(sorted(per_chunk))}, "
                f"of this model's {n_chunks}): saved from a model cut into other chunks?")
    # Of this process's chunks that have entries of their own: another process's chunks are
    # not in a state of its own, and a chunk without parameters has none (a renamed key was
    # asked whether the state came from other chunks).
    absent = [k for k in sorted(chunks) if k not in per_chunk and chunks[k].state_dict()]
    return (f"; it holds no entry of chunk{'s' if len(absent) > 1 else ''} {some_of(absent)} "
            f"of this model's {n_chunks}: saved from a model cut into other chunks?"
            if absent else "")


def _refuse_keys(c, missing, unexpected, held=""):
    raise KeyError(f"state_dict: chunk {c}: missing [{some_of(missing)}], "
                   f"unexpected [{some_of(unexpected)}]{held}")


def _renames_on_load(chunk):
    """Whether a module of `chunk` has a load_state_dict pre-hook, which may rename the
    entries it is given (a checkpoint of an earlier version migrated as it loads)."""
    return any(m._load_state_dict_pre_hooks for m in chunk.modules())


# The entries their own _load_from_state_dict gives the saved entry's shape.
_RESIZED_NAMES = (("min_val", "max_val"), ("scale", "zero_point"))


def _owner(chunk, key):
    """The module of `chunk` that holds entry `key` ("sub.module.name"), and the entry's own
    name."""
    module_name, _, name = key.rpartition(".")
    return (chunk.get_submodule(module_name) if module_name else chunk), name


def _resized_by_torch(chunk, key):
    """Whether torch's load_state_dict gives entry `key` of `chunk` the saved entry's shape:
    a quantization observer's statistics and fake quantization's scale and zero point start
    with one element and take a per-channel checkpoint's, which a shape check refused. Their
    other entries keep the check: torch raises for them, partway through a load."""
    module, name = _owner(chunk, key)
    return any(isinstance(module, cls) and name in names
               for cls, names in zip(_RESIZED_ON_LOAD, _RESIZED_NAMES))


def _filled_by_torch(chunk, key, state):
    """Whether torch's load_state_dict fills entry `key` of `chunk` itself where `state` lacks
    it: a norm layer's num_batches_tracked, in a state without torch's version metadata (a dict
    built by hand), which it starts from 0. Counted as missing, such a state was refused."""
    if getattr(state, "_metadata", None) is not None:
        return False
    module, name = _owner(chunk, key)
    return name == "num_batches_tracked" and \
        isinstance(module, torch.nn.modules.batchnorm._NormBase)


def apply_model_state(chunks, checked):
    """Loads check_model_state's result into the chunks (whose checks it passed). A chunk
    whose loading runs code of the user's (_own_loading) may raise where the checks could not
    tell (a configuration its extra state refuses): such chunks load first, each from a copy of
    its state taken just before, and one that raises puts them back, so that the load changes
    nothing (the chunks before it had been loaded, the ones after it not)."""
    own = [c for c in checked if _own_loading(chunks[c])]
    by_torch = getattr(checked, "keys_by_torch", ())
    kept = {}
    try:
        for c in own:
            kept[c] = _copy_state(chunks[c])
            with _checked_after_hooks(chunks[c], c, c in by_torch):
                got = chunks[c].load_state_dict(checked[c], strict=False)
            if c in by_torch:  # its names, compared once its pre-hooks have run
                _note_keys(checked.noted, c, got.missing_keys, got.unexpected_keys)
                if checked.strict and (got.missing_keys or got.unexpected_keys):
                    _refuse_keys(c, got.missing_keys, got.unexpected_keys)
    except BaseException as e:
        for c, state in kept.items():
            try:
                if state is not None:
                    chunks[c].load_state_dict(state, strict=False)
                else:
                    e.add_note(f"rrfp: chunk {c} could not be copied first; it may be loaded in "
                               "part")
            except Exception as again:  # noqa: BLE001 (the load's own error is the one raised)
                e.add_note(f"rrfp: chunk {c} could not be put back: {again}")
        raise
    for c, got in checked.items():
        if c not in kept:
            chunks[c].load_state_dict(got, strict=False)


@contextlib.contextmanager
def _checked_after_hooks(chunk, c, renames):
    """Where `renames` (chunk `c` has load pre-hooks, _renames_on_load), checks each module's
    entries as its own pre-hooks leave them, by a pre-hook of rrfp's that runs after them: an
    entry renamed from an old name matched nothing of the chunk's before, and torch's copy cast
    one of another dtype silently. A refusal raises inside the load, which
    apply_model_state puts back."""
    if not renames:
        yield
        return

    def check(module, state, prefix):
        own = itertools.chain(module._parameters.items(), (
            (k, b) for k, b in module._buffers.items()
            if k not in module._non_persistent_buffers_set))
        bad = [b for b in (_entry_problem(chunk, c, prefix + k, state[prefix + k], mine)
                           for k, mine in own if prefix + k in state) if b]
        if bad:
            raise ValueError(f"state_dict: chunk {c}: {some_of(bad, 3)} (as the chunk's load "
                             "pre-hooks left it)")

    handles = [m._register_load_state_dict_pre_hook(
        lambda state, prefix, *_, m=m: check(m, state, prefix)) for m in chunk.modules()]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _own_loading(chunk):
    """Whether loading `chunk` runs code that may raise where the checks passed: a module's
    set_extra_state or _load_from_state_dict defined outside torch, a load_state_dict hook, or
    quantization's modules, whose loading resizes and checks entries of its own."""
    base = torch.nn.Module
    for m in chunk.modules():
        t = type(m)
        if isinstance(m, _RESIZED_ON_LOAD):
            return True
        if t.set_extra_state is not base.set_extra_state or m._load_state_dict_pre_hooks or \
                getattr(m, "_load_state_dict_post_hooks", None):
            return True
        loader = t._load_from_state_dict
        if loader is not base._load_from_state_dict and \
                not getattr(loader, "__module__", "").startswith("torch."):
            return True
    return False


def _copy_state(chunk):
    """A copy of `chunk`'s state_dict to load back, its metadata kept, in host memory (a GPU
    has none to spare for a second model); None where its extra state cannot be copied."""
    state = chunk.state_dict()
    try:
        out = collections.OrderedDict(
            (k, v.detach().to("cpu", copy=True) if isinstance(v, torch.Tensor)
             else copy.deepcopy(v)) for k, v in state.items())
    except Exception:  # noqa: BLE001 (an object deepcopy refuses: loaded without a copy)
        return None
    out._metadata = getattr(state, "_metadata", {})
    return out


def load_model_state(chunks, n_chunks, state, strict):
    """Loads what `state` holds for `chunks`, or raises having loaded nothing
    (check_model_state). Returns torch's (missing_keys, unexpected_keys) of this process's
    chunks, by their full names, as torch's load_state_dict does (it returned None, and a load
    with strict=False could not tell what it skipped)."""
    keys = {}
    apply_model_state(chunks, check_model_state(chunks, n_chunks, state, strict, keys))
    return torch.nn.modules.module._IncompatibleKeys(keys.get("missing", []),
                                                     keys.get("unexpected", []))
