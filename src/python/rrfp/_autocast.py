"""The caller's autocast, carried into the stages' threads.

torch.autocast is thread-local, and a step's forwards run on the stages' threads: a step called
inside `with torch.autocast(...)` would have computed in full precision there, where a plain loop
under the same `with` computes in the lower one. So a step notes the regions active where it
was called, and each forward (with the loss) runs inside the same; backward tasks, like a plain
loop's `loss.backward()`, use what the forward recorded."""
import contextlib

import torch

_DEVICES = ("cpu", "cuda")


def _enabled(device_type):
    try:
        return torch.is_autocast_enabled(device_type)  # torch >= 2.4
    except TypeError:
        return torch.is_autocast_cpu_enabled() if device_type == "cpu" else \
            torch.is_autocast_enabled()


def _dtype(device_type):
    if hasattr(torch, "get_autocast_dtype"):  # torch >= 2.4
        return torch.get_autocast_dtype(device_type)
    return torch.get_autocast_cpu_dtype() if device_type == "cpu" else \
        torch.get_autocast_gpu_dtype()


def caller_autocast():
    """The autocast regions active in this thread, as ([(device type, dtype)], cache enabled),
    or None where there is none."""
    regions = [(d, _dtype(d)) for d in _DEVICES if _enabled(d)]
    return (regions, torch.is_autocast_cache_enabled()) if regions else None


@contextlib.contextmanager
def autocast_as(state):
    """Runs the block inside the regions caller_autocast() noted."""
    regions, cache = state
    with contextlib.ExitStack() as stack:
        for device_type, dtype in regions:
            stack.enter_context(torch.autocast(device_type, dtype=dtype, cache_enabled=cache))
        yield
