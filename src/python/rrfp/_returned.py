"""What the user's functions return to a stage's tasks, checked: the seconds of delay_fn and the
loss of loss_fn.

time.sleep took whatever delay_fn returned: NaN and -1 failed with sleep's own messages, inf and
1e300 overflowed, a tensor failed as an index, and True slept a second. The check runs before
every task, so its common case (an int or a float) costs a type test or two and a comparison."""
import numbers
import time

import torch

from ._tree import pack

# The longest delay: delay_fn is a test's hook (it varies the order tasks run in), and a task
# held longer than an hour is a slip, which no timeout could end (a task's Python cannot be
# interrupted).
MAX_DELAY = 3600


def checked_delay(value):
    """The seconds delay_fn returned: a real number (an int, a float, a NumPy scalar; not a
    bool, not a tensor) in [0, MAX_DELAY], or None for none."""
    if type(value) is not float and type(value) is not int:
        if value is None:
            return 0
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            hint = " (return float(t))" if isinstance(value, torch.Tensor) else ""
            raise TypeError(f"delay_fn: must return seconds as an int or a float in [0, "
                            f"{MAX_DELAY}] (or None), got {type(value).__name__} "
                            f"{value!r}{hint}")
    if not 0 <= value <= MAX_DELAY:  # NaN fails both
        raise ValueError(f"delay_fn: must return seconds in [0, {MAX_DELAY}], got {value!r}")
    return float(value)  # time.sleep takes no NumPy float32


def wait(delay_fn, stage, kind, chunk, mb):
    """Sleeps what delay_fn(stage, kind, chunk, mb) asks for (releasing the GIL, as a slow
    kernel would)."""
    seconds = checked_delay(delay_fn(stage, kind, chunk, mb))
    if seconds:
        time.sleep(seconds)


def checked_loss(loss, one_element):
    """What loss_fn returned, refused unless it is a tensor (of one element, for a step's
    backward); an evaluation step's failed on a float as an AttributeError of .detach(). Not a
    tensor is a TypeError; a tensor of another shape a ValueError, as torch's backward raises
    for a non-scalar's missing gradient (it was a TypeError)."""
    if not isinstance(loss, torch.Tensor):
        raise TypeError(f"loss_fn must return a tensor{' with one element' if one_element else ''}"
                        f", got {type(loss).__name__}")
    if one_element and loss.numel() != 1:
        raise ValueError(f"loss_fn must return a tensor with one element, got shape "
                         f"{tuple(loss.shape)}")
    return loss


def _requires_grad(out):
    """Whether a tensor of the last chunk's output requires grad (False where the output
    cannot be searched for its tensors)."""
    if isinstance(out, torch.Tensor):
        return out.requires_grad
    try:
        return any(t.requires_grad for t in pack(out, "the last chunk", plain_only=False)[1])
    except Exception:  # noqa: BLE001 (a message is being made: no new error)
        return False


def gradless(chunk, out, loss, module):
    """The error of a step in which no microbatch's loss requires grad. Where the output that
    loss_fn was given does, loss_fn cut the loss off from it: the message blamed frozen
    parameters, of a model whose every parameter trained. So where the last chunk (`module`)
    has parameters that train: its forward cut its output off (a reentrant checkpoint's output
    requires no grad where its input does not)."""
    head = "step: no microbatch's loss requires grad: "
    tail = "so the step's backward would compute nothing (a plain loop's backward raises); "
    if _requires_grad(out):
        return RuntimeError(
            head + f"loss_fn returned a loss without gradient history ({loss.dtype}), though "
            f"chunk {chunk}'s output, which it was given, requires grad: the loss was detached "
            "(.detach(), torch.no_grad()), made anew (torch.tensor(...)) rather than computed "
            "from the output, or is of an integer dtype (a count), " + tail + "return a "
            "floating-point loss computed from the output")
    if any(p.requires_grad for p in module.parameters()):
        return RuntimeError(
            head + f"chunk {chunk}'s output requires none, though parameters of it do: its "
            "forward cut the output off from them (torch.no_grad(), .detach(), or "
            "torch.utils.checkpoint with use_reentrant=True, the default, whose output wants no "
            "gradient where its input wants none: pass use_reentrant=False), " + tail +
            "keep the output's gradient history")
    return RuntimeError(
        head + f"no parameter it came through (chunks 0 to {chunk}) requires grad and a "
        "step's inputs may not, " + tail + "unfreeze a parameter, or call eval_step() for the "
        "losses alone")
