"""Loss scaling for float16 training, with the same API as torch.cuda.amp.GradScaler, whose
decision to skip a step every process of a pipeline shares.

Why not torch's: with a process per stage, torch's GradScaler looks for an infinity in that
process's gradients alone. A stage whose gradients overflowed skips its optimizer step and
halves its scale; the other stages step and keep theirs. From then on the last stage scales the
loss by one factor and the others unscale by another: every later gradient is silently wrong.
Here every process's finding is gathered over the job before any optimizer steps, so all of
them skip or step together and their scales stay equal.

The arithmetic is torch's: the loss times the scale (a float32 tensor of one element), each
gradient multiplied by the scale's float32 reciprocal and checked for a non-finite value, and
the scale backed off after a step that found one, or grown after `growth_interval` steps that
found none. Two differences keep a run alive where torch's steps on inf or NaN: the check reads
the unscaled gradient (torch's reads it before the multiply, so a finite one that overflows once
unscaled reaches the optimizer as inf), and the back-off stops at 2**-126, the smallest normal
float32 (torch's reaches 0.0, whose reciprocal makes every gradient inf or NaN). It runs in
plain tensor operations, so it also works on the CPU (torch 1.13's has no CPU loss scaler) and
in a plain loop (GradScaler() without a pipeline)."""
import contextlib
import math
import warnings

import torch

from ._args import is_number as _is_number
from ._calls import call_of
from ._scaler_job import agreed_found, agreed_update
from ._unscale import divide_and_check, key, left_out, unscalable
from ._scaler_state import MIN_SCALE, as_float32 as _as_float32, checked_state, \
    interval as _interval, positive as _positive

_READY, _UNSCALED, _STEPPED = 0, 1, 2


class GradScaler:
    """Scales the loss so that float16 gradients do not underflow, and skips the optimizer's
    step when a gradient overflowed, as torch.cuda.amp.GradScaler does:

        scaler = rrfp.GradScaler(pipe)   # the pipeline scales each microbatch's loss
        for inputs, targets in data:
            pipe.step(inputs, targets)   # returns the losses unscaled
            scaler.step(optimizer)       # unscales; steps unless some gradient is inf/NaN
            scaler.update()              # backs off or grows the scale

    With a pipeline, the first unscale_()/step() after update() decides for every optimizer
    (all skip if any of the pipeline's gradients was non-finite, where torch's scaler decides
    for each optimizer alone); with a process per stage (or replica) it and update() gather
    over every process of the pipeline's job, so every process skips or steps alike and every
    scale moves alike: each process calls unscale_()/step() at least once, then update().
    Without a pipeline (GradScaler()), scale(loss).backward() in a plain loop gives the same
    bits as a pipeline with one optimizer. A pipeline has one scaler; save() and load() keep
    its state."""

    def __init__(self, pipe=None, *, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        if not isinstance(enabled, bool):
            raise TypeError(f"enabled: True or False, got {type(enabled).__name__}")
        given = _positive("init_scale", init_scale, 0.0, math.inf,
                          "[2**-126, 3.4e38] (a finite float32 of at least the smallest normal)")
        self._scale = _as_float32("init_scale", given)
        # The scale as given, until it is first used: what torch's get_scale() and state_dict()
        # report before its scale tensor exists (0.1, where the float32 reads 0.10000000149...).
        self._given = float(given)
        self._growth_factor = _positive("growth_factor", growth_factor, 1.0, math.inf,
                                        "(1, inf)")
        self._backoff_factor = _positive("backoff_factor", backoff_factor, 0.0, 1.0, "(0, 1)")
        self._growth_interval = _interval("growth_interval", growth_interval)
        self._growth_tracker = 0
        self._updates = 0  # update() calls so far: the steps the floor's warning counts
        # The step that began the present run of overflowing steps (None: the last was good),
        # and whether the floor's warning was given in that run.
        self._overflowing_since, self._floor_said = None, False
        self._enabled = enabled
        self._optimizers = {}  # id(optimizer) -> [stage, found_inf]
        # Whether the first unscale_ since the last update() found an inf or NaN in any of the
        # pipeline's gradients (None: none has run yet): every later optimizer skips with it.
        self._found_first = None
        # The gradients a refused unscale_ divided here, by key(), with their versions then (held,
        # so that none is freed and its memory taken by a new one): a retry on them divided
        # twice.
        self._divided = {}
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
        with pipe._calls.hold("GradScaler"):
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
        with pipe._calls.hold("GradScaler.detach"):
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
        if self._pipe is not None and self._pipe._calls.holder == "step":
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

    def _core(self):
        """The pipeline's core, whose job the gathers go over; None without a pipeline."""
        return self._pipe._core if self._pipe is not None else None

    def _call(self, name):
        """The tag of a gather of `name` (_calls.gather); without a pipeline none is made."""
        return call_of(self._pipe, name) if self._pipe is not None else None

    def _state(self, optimizer):
        if not hasattr(optimizer, "param_groups"):  # an AttributeError naming no argument
            raise TypeError(f"optimizer: a torch.optim.Optimizer (with param_groups), got "
                            f"{type(optimizer).__name__}")
        return self._optimizers.setdefault(id(optimizer), [_READY, False])

    def unscale_(self, optimizer):
        """Divides the gradients of `optimizer`'s parameters by the scale, in place, and learns
        (over the pipeline's job) whether any was inf or NaN. With a pipeline, the first call
        since the last update() also reads (without changing) its other gradients in this
        process and decides over the job, and every optimizer skips if any was. Call it before
        clipping; step() calls it if you have not."""
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
        # The first call decides for every optimizer: with one optimizer per stage as threads,
        # step(opt0) came before opt1 was unscaled, and stage 0 stepped though stage 1 had
        # overflowed. So it alone gathers over the job: a gather for each call paired one
        # process's second optimizer's with another's next collective where processes hold
        # different numbers of optimizers (two on stage 0, one on stage 1), and a scale backed
        # off on one process alone.
        first = self._pipe is not None and self._found_first is None
        with self._holding("unscale_"):
            if self._pipe is not None and not first:  # decided over the job at the first call
                found = self._unscale_here(optimizer, False)
            else:
                divided = []  # what this process's part divides, for a refusal to note
                try:
                    found = agreed_found(
                        self, lambda: self._unscale_here(optimizer, first, divided),
                        "unscale_: process(es) {bad} could not unscale their gradients; their "
                        "own errors say why", "GradScaler.unscale_()")
                except BaseException:  # refused by the job: a retry must not divide them again
                    self._divided.update((key(g), (g, g._version)) for g in divided)
                    raise
        if first:
            self._found_first = found
        if self._divided:  # taken: the state below refuses another unscale_ of them
            for g in unscalable(optimizer):
                self._divided.pop(key(g), None)
        state[:] = [_UNSCALED, found or bool(self._found_first)]

    def _unscale_here(self, optimizer, first, divided=None):
        """This process's part of unscale_: whether any of its gradients, unscaled, is inf or
        NaN (`first`: the pipeline's that `optimizer` does not hold too). The gradients it
        divides are appended to `divided` (a list) once all are."""
        grads = unscalable(optimizer)  # every one checked before the first changes
        others = left_out(self._pipe, optimizer) if first else []
        self._given = None
        # Decided before any is divided: gradients that are views of one buffer (replicas')
        # share its version, which each division moves.
        done = [self._divided_before(g) for g in grads] if self._divided else [False] * len(grads)
        return divide_and_check(self._scale, grads, done, others, divided)

    def _divided_before(self, g):
        """Whether a refused unscale_ divided `g` (a gradient or a sparse one's values) and it
        has not changed since."""
        held = self._divided.get(key(g))
        return held is not None and held[1] == g._version

    def step(self, optimizer, *args, **kwargs):
        """optimizer.step(*args, **kwargs) unless some process's gradient of this optimizer (with
        a pipeline: of any of its parameters, since the last update()) was inf or NaN (then
        nothing, and None). Unscales first if unscale_ was not called."""
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
        return (self._pipe._calls.hold(what) if self._pipe is not None else
                contextlib.nullcontext())

    def _update(self, new_scale):
        found, given = agreed_update(self, new_scale, self._found, self._checked_new_scale)
        self._given = None  # set only once accepted: a refused update changes nothing
        if given is not None:
            self._scale = given
        else:
            self._follow_steps(found)
        self._updates += 1
        self._optimizers = {}
        self._found_first = None
        self._divided = {}
        self._on_device = {}

    @staticmethod
    def _checked_new_scale(new_scale):
        if isinstance(new_scale, torch.Tensor):
            if new_scale.numel() != 1:
                raise ValueError("update: new_scale must hold one element")
            new_scale = float(new_scale)
        if not _is_number(new_scale):  # torch's own TypeError named no argument
            raise TypeError(f"new_scale: a number or a one-element tensor, got "
                            f"{type(new_scale).__name__}")
        return _as_float32("new_scale", new_scale)

    def _found(self):
        """Whether any optimizer unscaled since the last update() found an inf or NaN."""
        checked = [s[1] for s in self._optimizers.values() if s[0] != _READY]
        if not checked:
            raise RuntimeError("update: no optimizer was unscaled or stepped since the last "
                               "update()")
        return any(checked)

    def _follow_steps(self, found):
        """Backs off after a step that found an inf or NaN (`found`, over the job: the first
        unscale_ decided for the pipeline's gradients, but a later call's parameters outside
        the pipeline were checked in their process alone, and every process's scale must move
        alike), else grows the scale every growth_interval steps that found none."""
        if found:
            if self._overflowing_since is None:
                self._overflowing_since = self._updates
            self._scale = self._backed_off()
            self._growth_tracker = 0
            return
        self._overflowing_since, self._floor_said = None, False
        if self._growth_tracker + 1 == self._growth_interval:
            grown = float(torch.tensor(self._scale * self._growth_factor, dtype=torch.float32))
            if math.isfinite(grown):
                self._scale = grown
            self._growth_tracker = 0
        else:
            self._growth_tracker += 1

    def _backed_off(self):
        """The scale times backoff_factor, in float32, but not under MIN_SCALE. Reaching it
        says so, once for each run of overflowing steps: a gradient non-finite at every scale
        comes from the model or the data, not from float16's range."""
        backed = float(torch.tensor(self._scale * self._backoff_factor, dtype=torch.float32))
        if backed >= MIN_SCALE:
            return backed
        if not self._floor_said:
            self._floor_said = True
            since = self._overflowing_since
            warnings.warn(
                f"GradScaler: every step since step {since} (counting update() calls from 0), "
                f"{self._updates - since + 1} in a row, found an inf or NaN gradient and was "
                "skipped; the scale stops at 2**-126, the smallest normal float32, and the "
                "steps go on being skipped until one finds none. Gradients non-finite at any "
                "scale come from the model or the data (an inf or NaN in a weight, an input or "
                "the loss), not from float16's range", RuntimeWarning, stacklevel=5)
        return MIN_SCALE

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
