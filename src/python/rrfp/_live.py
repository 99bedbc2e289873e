"""The pipelines alive in this process, for the exit handler (rrfp/__init__.py's _shutdown);
each pipeline's one call at a time; and the exit handler's wait for the calls a cancelled step
leaves running."""
import contextlib
import os
import threading
import time
import weakref

from . import _ended

# Every Pipeline, as it is built: the exit handler waits for their calls.
LIVE = weakref.WeakSet()


class Calls:
    """One call of a pipeline at a time: a second step, from another thread or from inside a
    task, would share the step's data and runtime with the first; a load during a step gave
    the step's gradients weights they did not come from, a clip ran before its gradients were
    there (and left them unclipped), a save wrote buffers its forwards were updating."""

    def __init__(self, transport):
        self.lock = threading.Lock()
        self.holder = None  # the call holding the lock, for the refusal's words
        self.holder_pid = None  # the process it runs in: wait_for_steps'
        self.transport, self._made_pid = transport, os.getpid()
        self.exiting = False  # set by the exit handler: no call starts after it

    def held_here(self):
        """Whether a call holds the pipeline in this process (not in the one it was forked
        from)."""
        return self.lock.locked() and self.holder_pid == os.getpid()

    @contextlib.contextmanager
    def hold(self, what):
        """Holds the pipeline for `what` (a call's name), or refuses it at once."""
        if self.transport != "inproc" and self._made_pid != os.getpid():
            # Its first gather would have joined the parent's job from here.
            raise RuntimeError(f"{what}: this process was forked from the one that made the "
                               f"pipeline, whose processes (over {self.transport}) talk to "
                               "that one: call it there, or make an in-process pipeline here "
                               "(transport='inproc')")
        if not self.lock.acquire(blocking=False):
            holder = self.holder  # read unlocked: for the words alone
            if holder in ("step", "eval_step"):
                doing = "another step" if what in ("step", "eval_step") else "a step"
            else:
                doing = f"its {holder}()" if holder else "another call"
            raise RuntimeError(f"{what}: {doing} of this pipeline is running (in another "
                               "thread, or this call comes from inside one of its tasks); a "
                               "pipeline runs one step, eval_step, load, load_state_dict, "
                               "save, clip_grad_norm_, or a change of its GradScaler (making "
                               "it, update, load_state_dict, unscale_), at a time")
        # Named before the exit handler's check, which reads them (_shutdown).
        self.holder, self.holder_pid = what, os.getpid()
        if self.exiting:
            self.holder = None
            self.lock.release()  # a daemon thread's call as the exit handler runs
            raise RuntimeError(f"{what}: the pipeline was shut down as the interpreter exits "
                               "(rrfp's exit handler ran): no call runs after it")
        raised = True
        try:
            yield
            raised = False
        except (TypeError, ValueError):
            # The caller's own mistake (an argument refused), which ends no job: a script that
            # caught it and ran out early is told as one whose calls differ.
            raised = False
            raise
        finally:
            _ended.call_ended(raised)
            self.holder = None
            self.lock.release()


def wait_for_steps(pipes, seconds):
    """Waits, at most `seconds` in all, until none of `pipes` is inside a call (a step that the
    exit handler cancelled on a daemon thread leaves it): the interpreter then ends, and a
    daemon thread caught inside torch's own calls as it does aborts the process."""
    deadline = time.monotonic() + seconds
    for pipe in pipes:
        calls = pipe._calls
        if calls.holder_pid != os.getpid():  # held in the process this one was forked from
            continue
        if calls.lock.acquire(timeout=max(deadline - time.monotonic(), 0)):
            calls.lock.release()
