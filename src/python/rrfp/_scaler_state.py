"""A GradScaler's settings and saved state, each checked as torch's scaler would keep it (a
float32 scale of at least 2**-126, factors in their ranges, int64 counts), before any is set."""
import math

import torch

from ._args import as_real, is_number, whole_index


def positive(name, value, low, high, interval):
    if not is_number(value):
        raise TypeError(f"{name}: a number, got {type(value).__name__}")
    value = as_real(name, value, f"must be in {interval}")
    if not (math.isfinite(value) and low < value < high):
        raise ValueError(f"{name}: must be in {interval}, got {value!r}")
    return value


_INT64_MAX = (1 << 63) - 1  # torch's scaler keeps the interval and the count as int64


def _whole(name, value, low):
    """A whole number in low..2**63-1: TypeError for another type (2.0, True), as _positive
    raises for what is no number, ValueError out of range."""
    whole = whole_index(value)  # a NumPy integer too
    if whole is None:
        raise TypeError(f"{name}: a whole number (int), got {type(value).__name__} {value!r}")
    value = whole
    if not low <= value <= _INT64_MAX:
        raise ValueError(f"{name}: a whole number in {low}..2**63-1, got {value!r}")
    return value


def interval(name, value):
    return _whole(name, value, 1)


def _number(name, value):
    """A one-element tensor's Python number (torch's state_dict may hold one), else `value`."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"load_state_dict: {name} must hold one element")
        return value.item()
    return value


# The smallest scale: the smallest normal float32. Below it the scale is subnormal, from 2**-128
# down its reciprocal overflows float32, and at 0.0 every unscaled gradient is inf or NaN.
MIN_SCALE = 2.0**-126


def _loaded_scale(value):
    """A saved scale as this scaler keeps it. One under MIN_SCALE (0.0 or a subnormal, where
    torch's back-off, and rrfp's before it stopped at MIN_SCALE, led after some 150 overflowing
    steps in a row) loads as MIN_SCALE: such a state was refused, and its run could not resume."""
    value = _number("scale", value)
    if not is_number(value):
        raise TypeError(f"scale: a number, got {type(value).__name__}")
    value = as_real("scale", value, "must be in [0, 3.4e38] (a finite float32)")
    if not (math.isfinite(value) and value >= 0.0):
        raise ValueError(f"scale: must be in [0, 3.4e38] (a finite float32; below 2**-126 it "
                         f"loads as 2**-126), got {value!r}")
    if float(torch.tensor(value, dtype=torch.float32)) < MIN_SCALE:
        return MIN_SCALE
    as_float32("scale", value)  # refused here if its float32 is inf
    return value


_STATE_KEYS = ("scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker")


def checked_state(state):
    """A GradScaler state_dict, every entry checked (each as the constructor checks it), as
    plain numbers: a state refused here changes no scaler (one entry set before a bad one was
    found left a scaler half loaded)."""
    if not isinstance(state, dict):
        raise TypeError(f"load_state_dict: a dict (a GradScaler's state_dict), got "
                        f"{type(state).__name__}")
    if not state:
        raise RuntimeError("load_state_dict: the state is empty (saved from a disabled "
                           "GradScaler?)")
    missing = set(_STATE_KEYS) - set(state)
    if missing:
        raise KeyError(f"load_state_dict: the state lacks {sorted(missing)}")
    return {"scale": _loaded_scale(state["scale"]),
            "growth_factor": positive("growth_factor", _number("growth_factor",
                                       state["growth_factor"]), 1.0, math.inf, "(1, inf)"),
            "backoff_factor": positive("backoff_factor", _number("backoff_factor",
                                        state["backoff_factor"]), 0.0, 1.0, "(0, 1)"),
            "growth_interval": interval("growth_interval", _number(
                "growth_interval", state["growth_interval"])),
            "_growth_tracker": _whole("_growth_tracker", _number(
                "_growth_tracker", state["_growth_tracker"]), 0)}


def as_float32(name, value):
    """The float32 value of a Python number: the scale is a float32, as torch's is, and at
    least MIN_SCALE (a smaller one's reciprocal is inf or loses bits)."""
    f = float(torch.tensor(as_real(name, value, "a finite float32"), dtype=torch.float32))
    if not (math.isfinite(f) and f >= MIN_SCALE):
        raise ValueError(f"{name}: a finite float32 of at least 2**-126 (the smallest normal "
                         f"float32), got {value!r}")
    return f
