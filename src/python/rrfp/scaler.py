"""Loss scaling for float16 training, with the same API as torch.cuda.amp.GradScaler, whose
decision to skip a step every process of a pipeline shares.

Why not torch's: with a process per stage, torch's GradScaler looks for an infinity in that
process's gradients alone. A stage whose gradients overflowed skips its optimizer step and
halves its scale; the other stages step and keep theirs. From then on the last stage scales the
loss by one factor and the others unscale by another: every later gradient is silently wrong.
Here every process's finding is gathered over the job before any optimizer steps, so all of
them skip or step together and their scales stay equal.

The arithmetic is torch's: the loss times the scale (a float32 tensor of one element), each
gradient checked for a non-finite value and multiplied by the scale's float32 reciprocal, and
the scale backed off after a step that found one, or grown after `growth_interval` steps that
found none. It runs in plain tensor operations, so it also works on the CPU (torch 1.13's has
no CPU loss scaler) and in a plain loop (GradScaler() without a pipeline)."""
import contextlib
import math

import torch

from ._args import is_number, is_whole
from ._launch import agreed_any

_READY, _UNSCALED, _STEPPED = 0, 1, 2


def _positive(name, value, low, high, interval):
    if not is_number(value):
        raise TypeError(f"{name}: a number, got {type(value).__name__}")
    value = float(value)
    if not (math.isfinite(value) and low < value < high):
        raise ValueError(f"{name}: must be in {interval}, got {value!r}")
    return value


_INT64_MAX = (1 << 63) - 1  # torch's scaler keeps the interval and the count as int64


def _whole(name, value, low):
    """A whole number in low..2**63-1: TypeError for another type (2.0, True), as _positive
    raises for what is no number, ValueError out of range."""
    if not is_whole(value):
        raise TypeError(f"{name}: a whole number (int), got {type(value).__name__} {value!r}")
    if not low <= value <= _INT64_MAX:
        raise ValueError(f"{name}: a whole number in {low}..2**63-1, got {value!r}")
    return value


def _interval(name, value):
    return _whole(name, value, 1)


def _number(name, value):
    """A one-element tensor's Python number (torch's state_dict may hold one), else `value`."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"load_state_dict: {name} must hold one element")
        return value.item()
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
    scale = _positive("scale", _number("scale", state["scale"]), 0.0, math.inf, "(0, inf)")
    _as_float32("scale", scale)  # refused here if its float32 is 0 or inf
    return {"scale": float(scale),
            "growth_factor": _positive("growth_factor", _number("growth_factor",
                                       state["growth_factor"]), 1.0, math.inf, "(1, inf)"),
            "backoff_factor": _positive("backoff_factor", _number("backoff_factor",
                                        state["backoff_factor"]), 0.0, 1.0, "(0, 1)"),
            "growth_interval": _interval("growth_interval", _number(
                "growth_interval", state["growth_interval"])),
            "_growth_tracker": _whole("_growth_tracker", _number(
                "_growth_tracker", state["_growth_tracker"]), 0)}


def _as_float32(name, value):
    """The float32 value of a Python number: the scale is a float32, as torch's is."""
    f = float(torch.tensor(value, dtype=torch.float32))
    if not (math.isfinite(f) and f > 0):
        raise ValueError(f"{name}: a positive finite float32, got {value!r}")
    return f


class GradScaler:
    """Scales the loss so that float16 gradients do not underflow, and skips the optimizer's
    step when a gradient overflowed, as torch.cuda.amp.GradScaler does:

        scaler = rrfp.GradScaler(pipe)   # the pipeline scales each microbatch's loss
        for inputs, targets in data:
            pipe.step(inputs, targets)   # returns the losses unscaled
            scaler.step(optimizer)       # unscales; steps unless some gradient is inf/NaN
            scaler.update()              # backs off or grows the scale

    With a process per stage (or replica), every process calls unscale_()/step() for each of
    its optimizers and then update(), in the same order: each unscale_ gathers, over every
    process of the pipeline's job, whether any gradient was non-finite, and every process
    skips or steps alike. Without a pipeline (GradScaler()), scale(loss).backward() in a
    plain loop gives the same bits as the pipeline. A pipeline has one scaler; save() and
    load() keep its state."""

    def __init__(self, pipe=None, *, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        if not isinstance(enabled, bool):
            raise TypeError(f"enabled: True or False, got {type(enabled).__name__}")
        given = _positive("init_scale", init_scale, 0.0, math.inf, "(0, inf)")
        self._scale = _as_float32("init_scale", given)
        # The scale as given, until it is first used: what torch's get_scale() and state_dict()
        # report before its scale tensor exists (0.1, where the float32 reads 0.10000000149...).
        self._given = float(given)
        self._growth_factor = _positive("growth_factor", growth_factor, 1.0, math.inf,
                                        "(1, inf)")
        self._backoff_factor = _positive("backoff_factor", backoff_factor, 0.0, 1.0, "(0, 1)")
        self._growth_interval = _interval("growth_interval", growth_interval)
        self._growth_tracker = 0
        self._enabled = enabled
        self._optimizers = {}  # id(optimizer) -> [stage, found_inf]
        self._on_device = {}  # device -> the scale as a (1,) float32 tensor there
        self._pipe = None
        if pipe is not None:
            self._attach(pipe)

    def _attach(self, pipe):
        """Becomes `pipe`'s scaler. A state its load() kept, loaded before any scaler was made,
        is taken now: the scale goes on from the checkpoint's whichever comes first, the scaler
        or the load (the state was dropped, silently: the scale started over)."""
        from . import _saving
        from .pipeline import Pipeline
        if not isinstance(pipe, Pipeline):
            raise TypeError(f"pipe: an rrfp.Pipeline or None, got {type(pipe).__name__}")
        # Not while a step runs: its later microbatches' losses alone were scaled.
        with pipe._one_call("GradScaler"):
            if pipe._data.scaler is not None:  # checked under the hold: two threads both passed
                raise ValueError("pipe: this pipeline has a GradScaler already; a pipeline's "
                                 "loss is scaled by one scaler (detach() that one, or let it "
                                 "go, first)")
            loaded = _saving.loaded_scaler_state(pipe)  # checked by the load
            if loaded is not None and self._enabled:
                self._set_state(loaded)
            pipe._data.scaler = self
            _saving.forget_scaler_state(pipe)  # the scaler's own state is saved from now on
            self._pipe = pipe

    def detach(self):
        """Stops scaling its pipeline's losses: the pipeline's later steps train unscaled, as
        they do once the scaler is let go of, and another GradScaler may be made for it. Not
        while a step runs (RuntimeError)."""
        pipe = self._pipe
        if pipe is None:
            return
        with pipe._one_call("GradScaler.detach"):
            if pipe._data.scaler is self:
                pipe._data.scaler = None
            self._pipe = None

    def is_enabled(self):
        return self._enabled

    def get_scale(self):
        """The scale, a Python float (1.0 when disabled)."""
        if not self._enabled:
            return 1.0
        return self._scale if self._given is None else self._given

    def get_growth_factor(self):
        return self._growth_factor

    def get_backoff_factor(self):
        return self._backoff_factor

    def get_growth_interval(self):
        return self._growth_interval

    def set_growth_factor(self, new_factor):
        self._growth_factor = _positive("new_factor", new_factor, 1.0, math.inf, "(1, inf)")

    def set_backoff_factor(self, new_factor):
        self._backoff_factor = _positive("new_factor", new_factor, 0.0, 1.0, "(0, 1)")

    def set_growth_interval(self, new_interval):
        self._growth_interval = _interval("new_interval", new_interval)

    def scale(self, outputs):
        """outputs (a tensor, or a list or tuple of them, nested) times the scale. Refused
        while the pipeline's step runs: it scales each microbatch's loss itself, and a loss_fn
        that returned scaler.scale(loss), as a plain loop's backward takes it, trained on the
        scale squared."""
        if self._pipe is not None and self._pipe._holder == "step":
            raise RuntimeError("scale: the pipeline scales each microbatch's loss itself while "
                               "its step runs; return the loss unscaled from loss_fn")
        return self._scaled(outputs)

    def _scaled(self, outputs):
        """scale() without its check: the pipeline's own scaling of a loss (rrfp/_stage.py)."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, torch.Tensor):
            return outputs * self._tensor(outputs.device)
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self._scaled(o) for o in outputs)
        raise TypeError(f"scale: expected a tensor or a list or tuple of them, got "
                        f"{type(outputs).__name__}")

    def _tensor(self, device):
        t = self._on_device.get(device)
        if t is None:
            self._given = None
            t = torch.full((1,), self._scale, dtype=torch.float32, device=device)
            self._on_device[device] = t
        return t

    def _state(self, optimizer):
        return self._optimizers.setdefault(id(optimizer), [_READY, False])

    def unscale_(self, optimizer):
        """Divides the gradients of `optimizer`'s parameters by the scale, in place, and learns
        (over the pipeline's job) whether any was inf or NaN. Call it before clipping; step()
        calls it if you have not."""
        if not self._enabled:
            return
        state = self._state(optimizer)
        if state[0] == _UNSCALED:
            raise RuntimeError("unscale_: already called on this optimizer since the last "
                               "update()")
        if state[0] == _STEPPED:
            raise RuntimeError("unscale_: called after step(); call update() first")
        # Every process learns whether any found one; a process that failed is told to every
        # other, which would otherwise wait in the next collective until its timeout. Not
        # while a step of the pipeline runs (it unscaled gradients the step was still adding
        # to): refused as the pipeline's own calls are.
        with self._holding("unscale_"):
            found = agreed_any(self._pipe._core if self._pipe is not None else None,
                               lambda: self._unscale_here(optimizer),
                               "unscale_: process(es) {bad} could not unscale their gradients; "
                               "their own errors say why")
        state[:] = [_UNSCALED, found]

    def _unscale_here(self, optimizer):
        """This process's part of unscale_: whether any of its gradients was inf or NaN."""
        grads = []
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.dtype == torch.float16:  # refused before any gradient changes
                    raise ValueError(
                        "unscale_: a parameter's gradient is float16, which loses what loss "
                        "scaling keeps; keep the parameters in float32 and compute in float16 "
                        "under torch.autocast")
                grads.append(p)
        self._given = None
        inv = torch.tensor([self._scale], dtype=torch.float64).reciprocal().float()
        invs = {inv.device: inv}
        flags = {}  # device -> whether each gradient there holds an inf or a NaN
        for p in grads:
            g = p.grad
            if g.is_sparse:  # as torch's scaler: coalesced only in float16, refused above
                g = g._values()
            # The check reads the gradient before it is unscaled, as torch's kernel does.
            flags.setdefault(g.device, []).append(torch.logical_not(torch.isfinite(g)).any())
            if g.device not in invs:
                invs[g.device] = inv.to(g.device)
            g.mul_(invs[g.device])
        # One wait for each device, not one for each gradient.
        return any(bool(torch.stack(fs).any()) for fs in flags.values())

    def step(self, optimizer, *args, **kwargs):
        """optimizer.step(*args, **kwargs) unless some process's gradient of this optimizer was
        inf or NaN (then nothing, and None). Unscales first if unscale_ was not called."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("step: a closure is not supported with loss scaling (the "
                               "closure's loss would not be scaled)")
        state = self._state(optimizer)
        if state[0] == _STEPPED:
            raise RuntimeError("step: already called on this optimizer since the last update()")
        if state[0] == _READY:
            self.unscale_(optimizer)
        result = None if state[1] else optimizer.step(*args, **kwargs)
        state[0] = _STEPPED
        return result

    def update(self, new_scale=None):
        """After the step's optimizers have stepped (or skipped): halves the scale (by
        backoff_factor) if any found an inf or NaN, else counts a good step and grows it (by
        growth_factor) every growth_interval good steps. new_scale: set it instead."""
        if not self._enabled:
            return
        with self._holding("update"):
            self._update(new_scale)

    def _holding(self, what):
        """Holds the pipeline for `what` (update, load_state_dict, unscale_), refused while a
        step runs: a new scale then scaled its microbatches' losses by two scales, and
        unscale_ divided gradients the step was still adding to."""
        return (self._pipe._one_call(what) if self._pipe is not None else
                contextlib.nullcontext())

    def _update(self, new_scale):
        if new_scale is not None:
            if isinstance(new_scale, torch.Tensor):
                if new_scale.numel() != 1:
                    raise ValueError("update: new_scale must hold one element")
                new_scale = float(new_scale)
            self._scale = _as_float32("new_scale", new_scale)
            self._given = None  # set only once accepted: a refused update changes nothing
        else:
            checked = [s[1] for s in self._optimizers.values() if s[0] != _READY]
            if not checked:
                raise RuntimeError("update: no optimizer was unscaled or stepped since the "
                                   "last update()")
            self._given = None
            if any(checked):
                self._scale = float(torch.tensor(self._scale * self._backoff_factor,
                                                 dtype=torch.float32))
                self._growth_tracker = 0
            elif self._growth_tracker + 1 == self._growth_interval:
                grown = float(torch.tensor(self._scale * self._growth_factor,
                                           dtype=torch.float32))
                if math.isfinite(grown):
                    self._scale = grown
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
        self._optimizers = {}
        self._on_device = {}

    def state_dict(self):
        """torch's GradScaler's entries: scale, growth_factor, backoff_factor, growth_interval,
        _growth_tracker ({} when disabled)."""
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval,
                "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state):
        """Loads a state_dict (this scaler's or torch's), or raises having changed nothing. A
        disabled scaler loads nothing, as torch's does, so that a script resuming with AMP off
        (`GradScaler(enabled=use_amp)`) runs (it raised RuntimeError)."""
        if not self._enabled:
            return
        with self._holding("load_state_dict"):
            self._set_state(checked_state(state))

    def _set_state(self, checked):
        """checked_state's result."""
        self._scale = _as_float32("scale", checked["scale"])
        if self._given is not None:  # still unused: the loaded number as given, as torch's
            self._given = checked["scale"]
        self._growth_factor = checked["growth_factor"]
        self._backoff_factor = checked["backoff_factor"]
        self._growth_interval = checked["growth_interval"]
        self._growth_tracker = checked["_growth_tracker"]
        self._on_device = {}
