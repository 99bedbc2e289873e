"""The checks of rrfp.Pipeline's arguments made before anything is built: a wrong type raises
TypeError and a value out of range ValueError, each naming the argument and what it takes.
The C++ core checks the values of its names (an unknown hint, placement, ...) in its own words;
what it could not take at all (None for a name, a whole number past a C int) reached pybind,
whose TypeError listed the constructor's signature and named no argument."""
import math
import numbers
import operator
import os
import sys
from collections.abc import Mapping, Set

import torch

INT_MAX = 2**31 - 1  # the core's counts are C ints

# The arguments the core takes as names, and the names each takes.
_NAMES = (("placement", '"loop" or "vshape"'),
          ("policy", '"ready" or "fixed"'),
          ("split_backward", '"auto", "on" or "off"'),
          ("comm", '"async" or "blocking"'))


MAX_TIMEOUT_S = 86400  # a day, as the core takes it


def is_whole(value):
    """Whether `value` is a whole number: an int, and not a bool (an int to Python, but True
    stages, parts or steps are a slip, not a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def whole_index(value):
    """The int of a whole number of any integer type (an int, a NumPy integer: whatever has
    __index__), or None for anything else, a bool of any kind included (True is no index)."""
    if isinstance(value, bool) or str(getattr(value, "dtype", "")) in ("bool", "torch.bool"):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def is_number(value):
    """Whether `value` is a real number of any kind (an int, a float, a NumPy scalar), and not
    a bool of any kind: `timeout=np.int64(5)` was refused as "got int64", where counts took it."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and \
        str(getattr(value, "dtype", "")) != "bool"


def as_real(name, value, takes):
    """float(value) of a real number; a whole number past a double's range raises ValueError
    naming `name` and what it `takes` (float() raised OverflowError, which no caller expects)."""
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{name}: {takes}, got a whole number past a double's range") from None


def _kind(value):
    return f"{type(value).__name__} {value!r}"


def check_whole(name, value, takes, low=None, high=None):
    """The int of `value`, the argument `name`: a whole number of any integer type (a NumPy
    integer too, as rrfp.split takes: a count computed with NumPy is one), else TypeError, in
    low..high, else ValueError, `takes` saying what it takes in either message."""
    whole = whole_index(value)
    if whole is None:
        raise TypeError(f"{name}: {takes}, got {_kind(value)}")
    if (low is not None and whole < low) or (high is not None and whole > high):
        raise ValueError(f"{name}: {takes}, got {value!r}")
    return whole


HINT_TAKES = "a schedule's name or rule (rrfp.hint_names()) or a hint file's path"


def path_or_name(name, value, takes):
    """`value`, the argument `name` (a name, or a file's path: `takes` says which), as the core
    takes a string: a path object becomes its str (./ before a bare name: it names a file),
    and a str that UTF-8 cannot encode (a file name of other bytes, which os.listdir gives
    with surrogate escapes) the bytes it stands for, which the core opens as they are;
    anything else raises TypeError. pybind refused both with its signature, naming no
    argument."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
        # A path object names a file: Path("gpipe") became "gpipe", which the core read as the
        # built-in schedule of that name, the file beside it ignored.
        here = b"./" if isinstance(value, bytes) else "./"
        if here[1:] not in value:
            value = here + value
    if not isinstance(value, (str, bytes)):
        raise TypeError(f"{name}: {takes}, got {_kind(value)}")
    # The core opens the text up to its first NUL: 'a\0junk' read (or wrote) the file 'a'.
    if ("\0" if isinstance(value, str) else b"\0") in value:
        raise ValueError(f"{name}: embedded null byte in {value!r}, which names no file")
    if isinstance(value, bytes):
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(value)
    return value


def arrival_after(timeout, arrival_timeout):
    """The arrival's wait in seconds, as the core takes it: never shorter than a step's
    `timeout`, 0 for none (as for a `timeout` of 0, never)."""
    if arrival_timeout == 0 or timeout == 0:
        return 0.0
    return float(max(arrival_timeout, timeout))


def warn_hint_shadows(hint):
    """A built-in hint's name runs the built-in where a file of that name is here too: said, as
    the command says it (the file was passed over without a word). Called two frames below
    the user's call (rrfp.simulate, Pipeline), whose line the warning names."""
    import warnings
    from . import _rrfp
    # Bytes too: b"gpipe" ran the built-in without the warning.
    name = os.fsdecode(hint) if isinstance(hint, bytes) else hint
    if isinstance(name, str) and name in _rrfp.hint_names() and os.path.isfile(name):
        warnings.warn(f"hint={hint!r} runs the built-in hint, not the file {name!r} here (give "
                      f"'./{name}' or a path object to run the file)", stacklevel=4)


def check_arguments(*, loss_fn, delay_fn, timeout, arrival_timeout, counts, names, hint,
                    transport, group, limit, max_pending_w, ordered_forwards):
    """Refuses what Pipeline cannot take (counts: {"pp": pp, ...}, whole numbers of any integer
    type, each made an int in place: a NumPy integer was refused here and taken by
    rrfp.simulate; names: {"placement": ..., ...}, as _NAMES). Returns the hint as the core
    takes it: a hint file given as a path object (pathlib.Path) becomes its str."""
    if not callable(loss_fn):
        raise TypeError("loss_fn must be callable")
    if delay_fn is not None and not callable(delay_fn):
        raise TypeError(f"delay_fn must be callable or None, got {type(delay_fn).__name__}")
    for name, value in (("timeout", timeout), ("arrival_timeout", arrival_timeout)):
        if not is_number(value):
            raise TypeError(f"{name}: seconds as a number, got {type(value).__name__}")
        if not 0 <= value <= MAX_TIMEOUT_S:  # NaN too; before c10d's groups are made with it
            raise ValueError(f"{name}: must be between 0 and {MAX_TIMEOUT_S} seconds, "
                             f"got {value!r}")
    for name, value in counts.items():
        whole = whole_index(value)
        if whole is None:
            raise TypeError(f"{name}: a whole number, got {_kind(value)}")
        if not -INT_MAX - 1 <= whole <= INT_MAX:  # within, the core says what it takes
            raise ValueError(f"{name}: must be at least 1 and at most {INT_MAX}, got {value}")
        counts[name] = whole
    for name, allowed in _NAMES:
        if not isinstance(names[name], str):
            raise TypeError(f"{name}: {allowed}, got {_kind(names[name])}")
    hint = path_or_name("hint", hint, HINT_TAKES)
    warn_hint_shadows(hint)
    if transport is not None and not isinstance(transport, str):
        raise TypeError(f'transport: "inproc", "mpi", "c10d" or None (as the process was '
                        f"started), got {_kind(transport)}")
    _check_group(group)
    if ordered_forwards is not None and not isinstance(ordered_forwards, bool):
        # 1 and 0 equal True and False, and passed the test `in (None, True, False)`.
        raise TypeError(f"ordered_forwards: True, False or None (auto), got "
                        f"{_kind(ordered_forwards)}")
    _check_bounds(limit, max_pending_w, names["policy"])
    return hint


def chunk_builder(chunks, n):
    """(build, chunks) of the `chunks` argument of a pipeline of `n` chunks: build(i) gives
    chunk i; `chunks` is the list of every chunk, or None for a function that builds this
    process's chunks only."""
    if callable(chunks) and not isinstance(chunks, torch.nn.Module):
        return chunks, None
    expected = (f"chunks: a list of nn.Module or a function chunk_fn(i) -> nn.Module, got "
                f"{type(chunks).__name__}")
    # Iterated, a dict (a ModuleDict too) gave its keys ("chunk 0 is a int"), a string its
    # letters, and a set its modules in no set order.
    if isinstance(chunks, (Mapping, torch.nn.ModuleDict)):
        raise TypeError(expected + " (list(chunks.values()) gives its values in order)")
    if isinstance(chunks, (str, bytes, Set)):
        raise TypeError(expected)
    try:
        chunks = list(chunks)
    except TypeError:  # "'NoneType' object is not iterable", naming no argument
        raise TypeError(expected) from None
    if len(chunks) != n:
        raise ValueError(f"chunks: expected pp * vpp = {n} modules, got {len(chunks)}")
    for c, m in enumerate(chunks):
        if not isinstance(m, torch.nn.Module):
            raise TypeError(f"chunks: chunk {c} is of type {type(m).__name__}, not an "
                            f"nn.Module")
    return chunks.__getitem__, chunks


def _check_group(group):
    """A group that is not a torch.distributed process group failed inside torch's own calls
    (an empty AssertionError) or in pybind's cast."""
    if group is None:
        return
    kind = getattr(torch.distributed, "ProcessGroup", None)  # None: torch without distributed
    if kind is None or not isinstance(group, kind):
        raise TypeError(f"group: a torch.distributed process group (torch.distributed.new_group"
                        f"(...) or the default group) or None, got {type(group).__name__}")


def _check_bounds(limit, max_pending_w, policy):
    for name, value in (("limit", limit), ("max_pending_w", max_pending_w)):
        if value is None:
            continue
        # Any integer type, as rrfp.simulate takes them: a bound computed with NumPy is one
        # (np.int64 was a TypeError here, and taken there).
        whole = whole_index(value)
        if whole is None:
            raise TypeError(f"{name}: a whole number or None, got {_kind(value)}")
        if not 0 <= whole <= INT_MAX:  # 0: the default, as the command and simulate take it
            raise ValueError(f"{name}: must be a whole number of at least 1 (and at most "
                             f"{INT_MAX}), or None or 0 for the default, got {value!r}")
        refuse_fixed_bound(name, whole, policy)


def refuse_fixed_bound(name, value, policy):
    """`limit` or `max_pending_w` (`name`; its `value` a whole number, None or 0 when not
    given) under `policy` "fixed": ValueError, for Pipeline and rrfp.simulate alike, as `rrfp
    simulate --policy fixed --limit` is refused. The fixed policy runs the hint's order, which
    alone decides what a stage holds: the bound was taken and ignored."""
    if value and policy == "fixed":
        raise ValueError(f"{name}: bounds what the ready policy holds; the fixed policy "
                         f"runs the hint's order, which alone decides it (got {name}="
                         f"{value} with policy='fixed')")


def stderr_is_terminal():
    """Whether sys.stderr is a terminal; no stderr (closed, pythonw: None) or one without
    isatty (a logger's tee) is none: Pipeline() raised AttributeError, for a line it shows."""
    try:
        return bool(sys.stderr.isatty())
    except (AttributeError, OSError, ValueError):  # ValueError: a closed file
        return False


def progress_after(progress):
    """Pipeline's `progress` as the seconds after which a step shows its line, or None (never).
    An infinity is never (its wait overflowed in the progress thread, every step); a NaN is
    refused (every comparison with it is false: the line showed at once)."""
    if isinstance(progress, str):
        if progress != "auto":
            raise ValueError(f'progress: seconds, "auto" or None, got {progress!r}')
        return 2.0 if stderr_is_terminal() else None
    if progress is None:
        return None
    if not is_number(progress):
        raise TypeError(f'progress: seconds as a number, "auto" or None, got {_kind(progress)}')
    try:
        seconds = float(progress)
    except OverflowError:  # a whole number past a double's range
        seconds = math.inf if progress > 0 else -math.inf
    if math.isnan(seconds) or seconds < 0:
        raise ValueError(f'progress: seconds (at least 0; inf: never), "auto" or None, got '
                         f"{progress!r}")
    return None if math.isinf(seconds) else seconds
