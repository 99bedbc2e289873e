"""The caller's thread-local settings, carried into the stages' threads.

A step's tasks run on the stages' threads, and some of torch's settings belong to the thread
that makes them: a step called inside `with torch.autocast(...)` would have computed in full
precision there, and one inside `torch.jit.optimized_execution(False)` would have run
TorchScript optimized, where a plain loop under the same `with` does neither. So a step notes
those settings where it was called, and each task runs under the same:
* autocast regions (device types, dtypes, whether casts are cached): around every forward, with
  the loss on the last chunk; backward tasks, like a plain loop's `loss.backward()`, follow
  what the forward recorded;
* whether TorchScript's executor optimizes: around every task.
"""
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


_get_optimize = getattr(torch._C, "_get_graph_executor_optimize", None)


class CallerState:
    """What a step's tasks take from the thread that called it."""

    def __init__(self):
        self.autocast = [(d, _dtype(d)) for d in _DEVICES if _enabled(d)]
        self.cache = torch.is_autocast_cache_enabled()
        # Left alone where it is the default: a task then pays nothing for it.
        self.optimize = None if _get_optimize is None or _get_optimize() else False

    def applies(self):
        return bool(self.autocast) or self.optimize is not None

    @contextlib.contextmanager
    def around(self, kind):
        """Runs a task of `kind` ("F", "B", "W") under the caller's settings."""
        with contextlib.ExitStack() as stack:
            if self.optimize is not None:
                stack.enter_context(torch.jit.optimized_execution(self.optimize))
            if kind == "F":
                for device_type, dtype in self.autocast:
                    stack.enter_context(torch.autocast(device_type, dtype=dtype,
                                                       cache_enabled=self.cache))
            yield
