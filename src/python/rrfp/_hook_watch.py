"""Python a chunk's forward attaches to its own tensors' backward, which a split backward would
run twice: a hook on a tensor inside the forward (`h.register_hook(fn)`), `h.retain_grad()`, and
saved-tensor hooks of the user's (`torch.autograd.graph.saved_tensors_hooks`). B and W each run
the part of the graph between the output and what they differentiate, so such a tensor on the
way to both the input and the parameters had its hooks run twice: `h.retain_grad()` read twice
its gradient, a hook that removes itself left W's weight gradients unhooked, and an unpack hook
that hands its tensor back once failed in W. torch 1.13 keeps these on the graph's C++ nodes,
where Python cannot see them; so `import rrfp` wraps the three entry points, and a split
chunk's forward, watched (watch/seen), computes its whole backward in B as a chunk with a module
backward hook does (StageRunner.whole). Outside a watched forward the wrappers cost one
thread-local read."""
import functools
import threading

import torch

_local = threading.local()  # .seen: None outside a watched forward, else whether one was put


def watch():
    """Starts watching this thread's forward; returns what seen() restores (a forward of
    another pipeline run inside this one, in this thread, is watched on its own)."""
    outer = getattr(_local, "seen", None)
    _local.seen = False
    return outer


def seen(outer):
    """Whether the forward watched since watch() put such a hook; ends the watch."""
    put = _local.seen
    _local.seen = outer
    return put


def _mark():
    if getattr(_local, "seen", None) is False:  # inside a watched forward
        _local.seen = True


def _note(t):
    if t.grad_fn is not None:  # a leaf's hooks run where its gradient is accumulated: in W alone
        _mark()


def entered():
    """(saved-tensor hooks this thread entered through saved_tensors_hooks and has not left,
    those of them that are the user's): a step compares the first with the thread's whole
    stack (hooks pushed past the wrapper count as the user's)."""
    return getattr(_local, "entered", 0), getattr(_local, "users", 0)


def _from_torch(fn):
    # torch's own saved-tensor hooks (non-reentrant checkpointing's, save_on_cpu's) hand their
    # tensor back as often as asked, so a split backward stays bitwise a whole one with them.
    return (getattr(fn, "__module__", None) or "").startswith("torch.")


def _install():
    tensor, hooks = torch.Tensor, torch.autograd.graph.saved_tensors_hooks
    if getattr(tensor.register_hook, "_rrfp_watched", False):
        return
    register_hook, retain_grad = tensor.register_hook, tensor.retain_grad
    enter, leave = hooks.__enter__, hooks.__exit__

    @functools.wraps(register_hook)
    def watched_register_hook(self, hook):
        _note(self)
        return register_hook(self, hook)

    @functools.wraps(retain_grad)
    def watched_retain_grad(self):
        _note(self)
        return retain_grad(self)

    @functools.wraps(enter)
    def watched_enter(self):
        self._rrfp_users = not _from_torch(self.pack_hook)  # what the exit takes back
        if self._rrfp_users:
            _mark()
        out = enter(self)
        _local.entered = getattr(_local, "entered", 0) + 1
        _local.users = getattr(_local, "users", 0) + self._rrfp_users
        return out

    @functools.wraps(leave)
    def watched_exit(self, *args):
        out = leave(self, *args)
        _local.entered = max(0, getattr(_local, "entered", 0) - 1)
        _local.users = max(0, getattr(_local, "users", 0) - getattr(self, "_rrfp_users", False))
        return out

    for f in (watched_register_hook, watched_retain_grad, watched_enter, watched_exit):
        f._rrfp_watched = True
    tensor.register_hook = watched_register_hook
    tensor.retain_grad = watched_retain_grad
    hooks.__enter__ = watched_enter
    hooks.__exit__ = watched_exit


_install()
