"""Checkpoints of a pipelined model, independent of its layout.

Every entry is named by the chunk it belongs to, "c.name" (c the chunk's index in model order),
so a checkpoint written by one layout (P stages, V chunks each, threads or a process per stage)
loads into any other that cuts the model into the same chunks. The optimizer's state is named
the same way, by the parameter it belongs to. With a process per stage each process writes the
part it holds and reads every part, keeping what its chunks need.

A save is one checkpoint or none: each process writes its part under the save's token
(part-RANK.TOKEN.pt, the token inside too) beside the folder's checkpoint, and manifest.json
(the token, how many parts), written once every process has written its part, is the commit:
a save that fails anywhere before it (a full disk, a process killed, the manifest itself)
leaves the previous checkpoint whole. The earlier saves' parts (and an earlier layout's extra
parts, which were merged silently) are removed after it."""
import copy
import glob
import io
import json
import os

import torch

MANIFEST = "manifest.json"


def model_state(chunks):
    """{"c.name": tensor} over `chunks` ({index: module}): parameters and buffers."""
    out = {}
    for c in sorted(chunks):
        for name, value in chunks[c].state_dict().items():
            out[f"{c}.{name}"] = value
    return out


def load_model_state(chunks, n_chunks, state, strict):
    """Loads what `state` holds for `chunks`; entries of chunks elsewhere are skipped. strict:
    an entry of no chunk at all, or a chunk missing one of its own, raises KeyError."""
    per_chunk = {}
    for key, value in state.items():
        c, _, name = key.partition(".")
        if not c.isdigit() or int(c) >= n_chunks:
            if strict:
                raise KeyError(f"state_dict: '{key}' names no chunk (expected 'c.name' with c "
                               f"in 0..{n_chunks - 1})")
            continue
        per_chunk.setdefault(int(c), {})[name] = value
    for c, module in chunks.items():
        got = per_chunk.get(c, {})
        missing, unexpected = module.load_state_dict(got, strict=False)
        if strict and (missing or unexpected):
            raise KeyError(f"state_dict: chunk {c}: missing {sorted(missing)}, "
                           f"unexpected {sorted(unexpected)}")


def _names(chunks, canonical):
    """id(parameter) -> its name; a parameter that several chunks share, by its first, and one
    tied across processes by its tie's first (`canonical`), which every copy shares, so that
    each layout finds its optimizer state."""
    names = {}
    for c in sorted(chunks):
        for name, p in chunks[c].named_parameters():
            names.setdefault(id(p), canonical.get(id(p), f"{c}.{name}"))
    return names


def optimizer_state(chunks, optimizer, canonical):
    """The optimizer's state_dict with every parameter named instead of numbered."""
    names = _names(chunks, canonical)
    sd = optimizer.state_dict()
    params = _own_params(optimizer, names)
    state = {names[id(params[i])]: s for i, s in sd["state"].items()}
    groups = []
    for g, saved in zip(optimizer.param_groups, sd["param_groups"]):
        entry = {k: v for k, v in saved.items() if k != "params"}
        entry["params"] = [names[id(p)] for p in g["params"]]
        groups.append(entry)
    return {"state": state, "param_groups": groups}


def _own_params(optimizer, names):
    """The optimizer's parameters in order, refused (ValueError) unless each is one of this
    pipeline's chunks' (`names`: theirs by id)."""
    params = [p for g in optimizer.param_groups for p in g["params"]]
    unknown = [i for i, p in enumerate(params) if id(p) not in names]
    if unknown:
        raise ValueError("optimizer: it holds parameters that are not this pipeline's chunks' "
                         f"(positions {unknown[:5]})")
    return params


def load_optimizer_state(chunks, optimizer, named, canonical):
    """Loads `named` (optimizer_state of any layout) into `optimizer`, whose parameters are
    this process's. Each group takes the hyper-parameters of the saved group that held the
    first of its parameters."""
    names = _names(chunks, canonical)
    _own_params(optimizer, names)  # a foreign one raised a KeyError holding its id
    group_of = {}
    for g in named["param_groups"]:
        for n in g["params"]:
            group_of[n] = g
    state, groups, index = {}, [], 0
    for g in optimizer.param_groups:
        first = names.get(id(g["params"][0])) if g["params"] else None
        saved = group_of.get(first)
        if first is not None and saved is None:
            raise KeyError(f"optimizer: the checkpoint has no state for parameter '{first}'")
        entry = {k: v for k, v in (saved or g).items() if k != "params"}
        entry["params"] = list(range(index, index + len(g["params"])))
        for p in g["params"]:
            n = names[id(p)]
            if n in named["state"]:
                # Its own copy: two copies of a tie in one process share a name, and one state
                # stepped for both would move them apart.
                state[index] = copy.deepcopy(named["state"][n])
            index += 1
        groups.append(entry)
    optimizer.load_state_dict({"state": state, "param_groups": groups})


def new_token():
    """A save's token: 48 random bits (exact as a float, for the job's gather)."""
    return int.from_bytes(os.urandom(6), "little")


def part_name(rank, token):
    return f"part-{rank}.{token:012x}.pt"


def _write_file(path, data):
    """`data` into `path` (a new file), flushed to the disk."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _remove(file):
    """Removes `file` if it is there (another process may have removed it already)."""
    try:
        os.remove(file)
    except OSError:
        pass


def write_part(path, rank, chunks, optimizer, extra, canonical, token):
    """Writes this process's part of the save `token` (part-RANK.TOKEN.pt) beside the folder's
    checkpoint, which it leaves as it is. A failure removes what it wrote."""
    os.makedirs(path, exist_ok=True)
    part = {"model": model_state(chunks), "extra": extra, "token": token}
    if optimizer is not None:
        part["optimizer"] = optimizer_state(chunks, optimizer, canonical)
    # Serialized first: a full disk is then an OSError from the write, where torch.save's own
    # writer aborted the process (c10::Error thrown past its destructor).
    buf = io.BytesIO()
    torch.save(part, buf)
    target = os.path.join(path, part_name(rank, token))
    try:
        _write_file(target + ".tmp", buf.getbuffer())
        os.replace(target + ".tmp", target)
    except BaseException:
        discard_part(path, rank, token)
        raise


def discard_part(path, rank, token):
    """Removes this process's part of the save `token` (one that did not complete)."""
    for f in (part_name(rank, token), part_name(rank, token) + ".tmp"):
        _remove(os.path.join(path, f))


def write_manifest(path, token, parts):
    """The save's commit: from here on the folder's checkpoint is `token`'s, parts
    0..parts-1 (written and in place)."""
    tmp = os.path.join(path, MANIFEST + ".tmp")
    try:
        _write_file(tmp, json.dumps({"token": token, "parts": parts}).encode())
        os.replace(tmp, os.path.join(path, MANIFEST))
    except BaseException:
        _remove(tmp)
        raise


def remove_other_parts(path, token):
    """The parts of earlier saves (and an earlier layout's), once `token`'s manifest is in
    place. Another process removing some of them at once is no error."""
    for f in glob.glob(os.path.join(path, "part-*.pt")) + glob.glob(
            os.path.join(path, "part-*.pt.tmp")):  # a killed process's unfinished part too
        if not os.path.basename(f).endswith(f".{token:012x}.pt"):
            _remove(f)


def _part_files(path):
    """The parts of the folder's checkpoint, with the token each must carry (None: a folder of
    an earlier version, without a manifest: every part-*.pt, as then)."""
    manifest = os.path.join(path, MANIFEST)
    if not os.path.isfile(manifest):
        files = sorted(glob.glob(os.path.join(path, "part-*.pt")))
        if not files:
            raise FileNotFoundError(f"checkpoint '{path}': no part-*.pt in it")
        return files, None
    with open(manifest) as f:
        m = json.load(f)
    if (not isinstance(m, dict) or not isinstance(m.get("parts"), int) or m["parts"] < 1 or
            not isinstance(m.get("token"), int)):
        raise ValueError(f"checkpoint '{path}': {MANIFEST} is not a manifest of parts")
    files = [os.path.join(path, part_name(r, m["token"])) for r in range(m["parts"])]
    missing = [os.path.basename(f) for f in files if not os.path.isfile(f)]
    if missing:
        raise FileNotFoundError(f"checkpoint '{path}': {', '.join(missing)} of its "
                                f"{m['parts']} parts missing")
    return files, m["token"]


def load_parts(path):
    """The parts of the checkpoint in the folder `path`, merged: (model state, optimizer state
    or None, extra). A part of another save than the manifest's is refused, naming it."""
    files, token = _part_files(path)
    model, state, groups, extra = {}, {}, [], None
    for f in files:
        part = torch.load(f, map_location="cpu")
        if token is not None and part.get("token") != token:
            step = (part.get("extra") or {}).get("step")
            raise ValueError(
                f"checkpoint '{path}': {os.path.basename(f)} holds a part of another save "
                f"than its {MANIFEST}" + (f" (its step {step})" if step is not None else "") +
                ": the folder's files were changed or copied since it was saved")
        model.update(part["model"])
        if extra is None:
            extra = part.get("extra")
        if "optimizer" in part:
            state.update(part["optimizer"]["state"])
            groups.extend(part["optimizer"]["param_groups"])
    optim = {"state": state, "param_groups": groups} if groups else None
    return model, optim, extra


def refuse_not_optimizer(what, optimizer):
    """Pipeline.save() and load() take one optimizer: a list of them failed deep inside with an
    AttributeError."""
    if optimizer is not None and not (hasattr(optimizer, "state_dict") and
                                      hasattr(optimizer, "param_groups")):
        raise TypeError(f"{what}: optimizer must be one optimizer (with state_dict and "
                        f"param_groups) or None, got {type(optimizer).__name__}; with several, "
                        "save each to a folder of its own, or build one over every parameter "
                        "group")
