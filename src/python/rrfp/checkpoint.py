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
parts, which were merged silently) are removed after it.

A load reads every file and checks what it will load (check_model_state,
optimizer_load_state) before anything is loaded: a refused one changes nothing. Every file's
fields are checked before use, and a damaged one is refused naming it: a part carries the
SHA-256 of its bytes (the zip archive's comment, so that torch.load still reads it), checked
before it is read (a part of an earlier version, without one, loads as then). Only regular
files are opened (a named pipe blocked the load for ever)."""
import collections
import glob
import hashlib
import io
import json
import os
import re
import stat

import torch

from . import _extras
from ._args import is_whole
# The model's state by chunk, in a module of its own; named here too, where they always were.
from ._model_state import (  # noqa: F401 (names of this module)
    apply_model_state, check_model_state, load_model_state, metadata_of, model_state, some_of)
# The optimizer's state likewise.
from ._optimizer_state import elsewhere, optimizer_load_state, optimizer_state  # noqa: F401

MANIFEST = "manifest.json"


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


def _kind(file):
    """What `file` is, for a refusal: "a folder", "a named pipe", ..."""
    try:
        mode = os.stat(file).st_mode
    except OSError:
        return "a symbolic link to nothing" if os.path.islink(file) else "not there"
    for test, kind in ((stat.S_ISREG, "a file"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "a device"


# A part's checksum: the SHA-256 of every byte before it, in hex, as the zip archive's comment
# (its last bytes): torch.load reads the part as any archive, and hex holds no byte of the
# end-of-archive record's signature, which a zip reader looks for from the end.
_SUM = b"rrfp-sha256:"
_SUM_BYTES = len(_SUM) + 64
# How far from its place the checksum's text is still looked for, where bytes were dropped or
# added near the end of a part.
_SHIFT_BYTES = 64


def _seal(buf):
    """Appends the checksum to the archive torch.save wrote into `buf`. An archive that does
    not end as torch's do (no comment) is left without one, as parts were before."""
    with buf.getbuffer() as data:
        # The end-of-archive record: 22 bytes, its comment's length last.
        if len(data) < 22 or data[-22:-18] != b"PK\x05\x06" or data[-2:] != b"\0\0":
            return
        data[-2:] = _SUM_BYTES.to_bytes(2, "little")  # the comment's length
        digest = hashlib.sha256(data).hexdigest().encode()
    buf.seek(0, io.SEEK_END)
    buf.write(_SUM + digest)


def write_part(path, rank, chunks, optimizer, extra, canonical, token, extras=None,
               others=None):
    """Writes this process's part of the save `token` (part-RANK.TOKEN.pt) beside the folder's
    checkpoint, which it leaves as it is (`extras`: its stage's replicas' own, _extras.py;
    `others`: the parameters of other processes' chunks the optimizer may hold, left out). A
    failure removes what it wrote."""
    try:
        os.makedirs(path, exist_ok=True)
    except FileExistsError:  # "File exists", about a file the user named as the folder
        raise NotADirectoryError(
            f"save: '{path}' is {_kind(path)}, not a folder: a checkpoint is a folder (its "
            f"{MANIFEST} and part-*.pt files); name a new folder or a checkpoint's") from None
    part = dict(extras or {}, model=model_state(chunks), extra=extra, token=token)
    if optimizer is not None:
        part["optimizer"] = optimizer_state(chunks, optimizer, canonical, others)
    # Serialized first: a full disk is then an OSError from the write, where torch.save's own
    # writer aborted the process (c10::Error thrown past its destructor).
    buf = io.BytesIO()
    torch.save(part, buf)
    _seal(buf)
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
    # The folder's name is escaped: `run[1]` as a pattern matched `run1`, whose parts went.
    for f in glob.glob(os.path.join(glob.escape(path), "part-*.pt")) + glob.glob(
            os.path.join(glob.escape(path), "part-*.pt.tmp")):  # a killed one's unfinished part
        if not os.path.basename(f).endswith(f".{token:012x}.pt"):
            _remove(f)


# A manifest is a line of JSON; one larger than this is no manifest, and is not read whole.
_MANIFEST_BYTES = 1 << 16
MAX_PARTS = 1 << 16  # the most parts a manifest may name (each one is a process's)
_TOKEN_END = 1 << 48  # new_token's range
_TOKENED = re.compile(r"part-[0-9]+\.[0-9a-f]{12}\.pt")  # part_name's


def _read_manifest(path, max_parts):
    """(token, parts) of the manifest in `path`, every field checked before it is used: a part
    count from a damaged file sized the list of parts to look for (10**9 ran for minutes)."""
    with _open_file(path, MANIFEST) as f:
        data = f.read(_MANIFEST_BYTES + 1)
    where = f"checkpoint '{path}': {MANIFEST}"
    if len(data) > _MANIFEST_BYTES:
        raise ValueError(f"{where} is over {_MANIFEST_BYTES} bytes: not a manifest")
    def once(pairs):  # a key given twice: json.loads kept the last without a word
        keys = [k for k, _ in pairs]
        twice = next((k for k in keys if keys.count(k) > 1), None)
        if twice is not None:
            raise ValueError(f"key {twice[:40]!r} appears twice in one object")
        return dict(pairs)
    try:
        m = json.loads(data.decode("utf-8"), object_pairs_hook=once)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError, JSONDecodeError
        raise ValueError(f"{where} is not a manifest (damaged?): {e}") from e
    token = m.get("token") if isinstance(m, dict) else None
    parts = m.get("parts") if isinstance(m, dict) else None
    if not (is_whole(token) and 0 <= token < _TOKEN_END):
        raise ValueError(f"{where} is not a manifest of parts: its token is "
                         f"{repr(token)[:40]}, not a whole number in [0, 2**48)")
    if not (is_whole(parts) and 1 <= parts <= MAX_PARTS):  # true counted as 1 part
        raise ValueError(f"{where} is not a manifest of parts: it names {repr(parts)[:40]} "
                         f"parts, not a whole number in 1..{MAX_PARTS}")
    if parts > max_parts:
        raise ValueError(f"{where} names {parts} parts, more than this model's {max_parts} "
                         "chunks (a part holds one or more): saved from a model cut into other "
                         "chunks?")
    return token, parts


def missing_parts(path, token, parts):
    """The ranks among 0..parts-1 whose part of the save `token` is not in `path`."""
    return [r for r in range(parts) if not os.path.isfile(os.path.join(path,
                                                                      part_name(r, token)))]


def _open_file(path, name):
    """The file `name` in the folder `path`, opened to read, refused (ValueError naming it)
    unless it is a regular file: open() of a named pipe waited for a writer for ever, and a
    device may never end. Opened first, without waiting, then looked at: what is read is what
    was looked at. A file that cannot be opened keeps its OSError, which names it."""
    file = os.path.join(path, name)
    try:
        fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) |
                     getattr(os, "O_BINARY", 0))
    except OSError:
        if os.path.isfile(file) or not os.path.lexists(file):
            raise
        fd = None  # a symbolic link to nothing, a folder where folders are not opened
    if fd is None or not stat.S_ISREG(os.fstat(fd).st_mode):
        kind = _kind(file)
        if fd is not None:
            os.close(fd)
        raise ValueError(f"checkpoint '{path}': {name} is {kind}, not a file: refused (a "
                         "checkpoint's files are regular files)")
    return os.fdopen(fd, "rb")  # O_NONBLOCK changes nothing for a regular file


def _part_files(path, max_parts):
    """The parts of the folder's checkpoint, with the token each must carry (None: a folder of
    an earlier version, without a manifest: every part-*.pt, as then)."""
    if os.path.lexists(path) and not os.path.isdir(path):  # found no part-*.pt "in it"
        raise NotADirectoryError(
            f"checkpoint '{path}' is {_kind(path)}, not a folder: a checkpoint is a folder (its "
            f"{MANIFEST} and part-*.pt files); name the folder save() wrote")
    # A manifest that is there but no file (a folder, a named pipe, a link to nothing) is
    # refused by _read_manifest: taken for none, every part-*.pt was read, a later save's
    # uncommitted part among them.
    if not os.path.lexists(os.path.join(path, MANIFEST)):
        files = sorted(glob.glob(os.path.join(glob.escape(path), "part-*.pt")))
        if not files:
            raise FileNotFoundError(f"checkpoint '{path}': no part-*.pt in it" if
                                    os.path.lexists(path) else
                                    f"checkpoint '{path}': no such folder")
        # A part named by its save's token was written by a version that commits each save by
        # its manifest: without one, that save never committed (or its manifest was removed),
        # and merged with another's parts, the load took whichever part sorted last.
        tokened = [os.path.basename(f) for f in files
                   if _TOKENED.fullmatch(os.path.basename(f))]
        if tokened:
            # Beside an earlier version's checkpoint (parts without a token), a save of this one
            # that did not finish: removing its parts gives that checkpoint back.
            earlier = [os.path.basename(f) for f in files
                       if not _TOKENED.fullmatch(os.path.basename(f))]
            raise ValueError(
                f"checkpoint '{path}': {some_of(tokened)} without the {MANIFEST} that commits "
                "its save (a save that did not finish, or files copied without it): load the "
                "folder save() wrote, or save again" +
                (f"; without them the folder's earlier checkpoint ({some_of(earlier)}) loads"
                 if earlier else ""))
        return files, None
    token, parts = _read_manifest(path, max_parts)
    # A part there but no file is refused as it is opened, rather than called missing.
    missing = [r for r in range(parts)
               if not os.path.lexists(os.path.join(path, part_name(r, token)))]
    if missing:
        raise FileNotFoundError(
            f"checkpoint '{path}': {some_of(part_name(r, token) for r in missing)} of its "
            f"{parts} parts missing")
    return [os.path.join(path, part_name(r, token)) for r in range(parts)], token


def _check_sum(path, name, f):
    """Refuses (ValueError) the part open in `f` unless its bytes are those its checksum was
    taken of (_seal): torch.load read a part with bytes overwritten without a word, NaNs in
    its tensors. One without a checksum (an earlier version's) passes, as torch.load decides."""
    size = os.fstat(f.fileno()).st_size
    # The end-of-archive record and its comment, and a few bytes before them (_SHIFT_BYTES).
    f.seek(max(size - _SUM_BYTES - 22 - _SHIFT_BYTES, 0))
    wide = f.read(_SUM_BYTES + 22 + _SHIFT_BYTES)
    tail = wide[-(_SUM_BYTES + 22):]
    f.seek(0)  # for torch.load, after this
    # Sealed, the end-of-archive record gives a comment of _SUM_BYTES: a damaged marker then is
    # damage (taken for an earlier version's part, it went unchecked), not an unsealed part. So
    # is the checksum's text near the end where the record does not parse (a byte dropped or
    # added there let a part whose data was changed too load unchecked).
    sealed = (len(tail) == _SUM_BYTES + 22 and tail[:4] == b"PK\x05\x06"
              and tail[20:22] == _SUM_BYTES.to_bytes(2, "little"))
    end = tail[22:]
    if not sealed or not end.startswith(_SUM):
        if sealed or _SUM in wide:
            raise ValueError(f"checkpoint '{path}': {name} is damaged: the SHA-256 saved in it "
                             "cannot be read")
        return
    digest, left = hashlib.sha256(), size - _SUM_BYTES
    while left > 0:  # the size looked at, in pieces: bounded, whatever the file holds
        data = f.read(min(left, 1 << 22))
        if not data:  # cut short meanwhile
            break
        digest.update(data)
        left -= len(data)
    if left or digest.hexdigest().encode() != end[len(_SUM):]:
        raise ValueError(f"checkpoint '{path}': {name} is damaged: its bytes are not those "
                         "it was saved with (their SHA-256 differs from the one saved in it)")
    f.seek(0)


def _read_part(path, file, token):
    """The part in `file`, its contents checked: a damaged file raises ValueError naming it
    (torch's and pickle's own errors named neither the file nor the checkpoint). A file that
    cannot be opened keeps its OSError, which names it."""
    name = os.path.basename(file)
    with _open_file(path, name) as f:  # its own OSError (not there, not allowed) names it
        _check_sum(path, name, f)
        try:
            part = torch.load(f, map_location="cpu")
        except MemoryError:
            raise
        except Exception as e:  # noqa: BLE001 (zip, pickle, EOF, OSError(EINVAL), a class
            # missing here: what the file holds, whatever torch raises for it)
            raise ValueError(f"checkpoint '{path}': {name} could not be read as a part "
                             f"(damaged, cut short?): {type(e).__name__}: {str(e)[:200]}") from e
    optim = part.get("optimizer") if isinstance(part, dict) else None
    if not (isinstance(part, dict) and isinstance(part.get("model"), dict) and
            isinstance(part.get("extra"), (dict, type(None))) and _extras.checked(part) and
            (optim is None or _is_optimizer_state(optim))):
        raise ValueError(f"checkpoint '{path}': {name} is not a part of a checkpoint (its "
                         "contents are not a model's and an optimizer's state)")
    if token is not None and part.get("token") != token:
        step = (part.get("extra") or {}).get("step")
        raise ValueError(
            f"checkpoint '{path}': {name} holds a part of another save than its {MANIFEST}" +
            (f" (its step {repr(step)[:40]})" if step is not None else "") +
            ": the folder's files were changed or copied since it was saved")
    return part


def _is_optimizer_state(optim):
    """Whether `optim` is optimizer_state's shape: named state, groups naming parameters."""
    return (isinstance(optim, dict) and isinstance(optim.get("state"), dict) and
            isinstance(optim.get("type", ""), str) and
            isinstance(optim.get("param_groups"), list) and
            all(isinstance(g, dict) and isinstance(g.get("params"), list) and
                all(isinstance(n, str) for n in g["params"]) for g in optim["param_groups"]))


def load_parts(path, max_parts=MAX_PARTS):
    """The parts of the checkpoint in the folder `path`, merged: (model state, optimizer state
    or None, the first part's extra, (every process's saved extras, the layouts that saved
    them (_extras.own_extra), the save's token)). A part of another save than the manifest's is
    refused, naming
    it; so is a manifest naming more than `max_parts` parts (a model of C chunks was saved in
    at most C)."""
    files, token = _part_files(path, max_parts)
    model, state, groups, extra, saved, layouts = collections.OrderedDict(), {}, [], None, {}, []
    meta = None  # parts saved before the metadata was kept have none
    types = {}  # parameter name -> its optimizer's type (parts saved before it was kept: none)
    for f in files:
        part = _read_part(path, f, token)
        model.update(part["model"])
        if metadata_of(part["model"]) is not None:
            meta = dict(meta or {}, **metadata_of(part["model"]))
        if extra is None:
            extra = part.get("extra")
        saved.update(part.get(_extras.EXTRAS) or {})
        if part.get(_extras.LAYOUT) is not None and part[_extras.LAYOUT] not in layouts:
            layouts.append(part[_extras.LAYOUT])
        if part.get("optimizer") is not None:
            state.update(part["optimizer"]["state"])
            groups.extend(part["optimizer"]["param_groups"])
            kind = part["optimizer"].get("type")  # each process saves its own optimizer
            types.update({n: kind for g in part["optimizer"]["param_groups"] for n in g["params"]
                          if kind is not None})
    optim = {"state": state, "param_groups": groups, "types": types} if groups else None
    if meta is not None:
        model._metadata = meta
    return model, optim, extra, (saved, layouts, token)


def refuse_not_optimizer(what, optimizer):
    """Pipeline.save() and load() take one optimizer: a list of them failed deep inside with an
    AttributeError."""
    if optimizer is not None and not (hasattr(optimizer, "state_dict") and
                                      hasattr(optimizer, "param_groups")):
        raise TypeError(f"{what}: optimizer must be one optimizer (with state_dict and "
                        f"param_groups) or None, got {type(optimizer).__name__}; with several, "
                        "save each to a folder of its own, or build one over every parameter "
                        "group")
