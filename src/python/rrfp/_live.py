"""The pipelines alive in this process, for the exit handler (rrfp/__init__.py's _shutdown),
and its wait for the calls a cancelled step leaves running."""
import os
import time
import weakref

# Every Pipeline, as it is built: the exit handler waits for their calls.
LIVE = weakref.WeakSet()


def wait_for_steps(pipes, seconds):
    """Waits, at most `seconds` in all, until none of `pipes` is inside a call (a step that the
    exit handler cancelled on a daemon thread leaves it): the interpreter then ends, and a
    daemon thread caught inside torch's own calls as it does aborts the process."""
    deadline = time.monotonic() + seconds
    for pipe in pipes:
        if pipe._holder_pid != os.getpid():  # held in the process this one was forked from
            continue
        if pipe._busy.acquire(timeout=max(deadline - time.monotonic(), 0)):
            pipe._busy.release()
