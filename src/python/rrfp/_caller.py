"""The caller's thread-local settings, carried into the stages' threads.

A step's tasks run on the stages' threads, and some settings belong to the thread that makes
them. torch's own thread-local state (a profiler's, torch function and dispatch modes,
saved-tensor hooks, autocast's dispatch keys) each stage's thread takes from the caller's as the
step starts (PipelineCore::run_step, PyStageProgram::begin_step), as torch's autograd engine
hands it to its worker threads. What that state leaves out, a step notes where it was called,
and each task runs under the same:
* autocast regions (device types, dtypes, whether casts are cached): around every forward, with
  the loss on the last chunk; backward tasks run with autocast off, as a plain loop's
  `loss.backward()` called after the `with` block, which torch recommends, runs;
* whether TorchScript's executor optimizes: around every task;
* the caller's `contextvars` context (a config a forward reads with `ContextVar.get()`): each
  stage's tasks run in a copy of it;
* the user's saved-tensor hooks around step(): the split chunks compute their whole backward in
  B (W would unpack the saved tensors a second time; rrfp._hook_watch).
"""
import contextlib
import contextvars

import torch

from . import _hook_watch, _rrfp

AUTOCAST_DEVICES = ("cpu", "cuda")


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
        self.autocast = [(d, _dtype(d)) for d in AUTOCAST_DEVICES if _enabled(d)]
        self.cache = torch.is_autocast_cache_enabled()
        # Left alone where it is the default: a task then pays nothing for it.
        self.optimize = None if _get_optimize is None or _get_optimize() else False
        context = contextvars.copy_context()
        self.context = context if len(context) else None
        self._contexts = {}  # stage -> its copy (a context runs on one thread at a time)
        # The user's saved-tensor hooks around the step, which a split backward would unpack
        # twice; torch's own (save_on_cpu) hand a tensor back as often as asked. Hooks pushed
        # past the wrapper (more on the stack than it saw entered) count as the user's.
        stack = _rrfp._saved_tensor_hooks_depth()
        entered, users = _hook_watch.entered()
        self.saved_hooks = users > 0 or stack > entered

    def applies(self):
        return bool(self.autocast) or self.optimize is not None or self.context is not None \
            or self.saved_hooks

    def run(self, stage, fn, *args):
        """fn(*args) in stage `stage`'s copy of the caller's contextvars context."""
        if self.context is None:
            return fn(*args)
        context = self._contexts.get(stage)
        if context is None:
            context = self._contexts[stage] = self.context.copy()
        return context.run(fn, *args)

    @contextlib.contextmanager
    def around(self, kind):
        """Runs a task of `kind` ("F", "B", "W") under the caller's settings."""
        with contextlib.ExitStack() as stack:
            if self.optimize is not None:
                stack.enter_context(torch.jit.optimized_execution(self.optimize))
            for device_type, dtype in self.autocast:
                # The stage's thread has the caller's autocast keys (its thread-local state),
                # not its dtype: set for a forward, off for a backward.
                stack.enter_context(torch.autocast(device_type, dtype=dtype,
                                                   cache_enabled=self.cache)
                                    if kind == "F" else torch.autocast(device_type,
                                                                       enabled=False))
            yield
