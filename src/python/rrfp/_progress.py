"""The progress line of a long step (Pipeline's `progress`)."""
import sys
import threading
import time


def _write(text):
    """Writes `text` to stderr, True if it could: the line is for people, and a stderr that is
    gone (None, closed) or a stream without flush must not fail the step or its thread."""
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
        return True
    except (AttributeError, OSError, ValueError):
        return False


class Progress:
    """A line on stderr for a step that runs past `pipe._progress` seconds: the tasks this
    process has done of its own, and the time so far; erased when the step ends."""

    def __init__(self, pipe, step):
        self.after = pipe._progress
        self.runners = pipe._runners
        self.step = step
        kinds = 3 if pipe._core.split_backward else 2
        self.total = sum(len(pipe._core.chunks_of(s)) for s in pipe.stages) * \
            pipe.microbatches * kinds
        self.done = threading.Event()
        self.shown = False

    def done_tasks(self):
        return sum(r.tasks_done for r in self.runners) - self.base

    def __enter__(self):
        self.base = sum(r.tasks_done for r in self.runners)
        if self.after is not None:
            self.start = time.monotonic()
            self.thread = threading.Thread(target=self._show, daemon=True)
            self.thread.start()
        return self

    def _show(self):
        # A wait past TIMEOUT_MAX (progress=1e300, say) raises OverflowError in this thread.
        first = min(max(self.after, 0.01), threading.TIMEOUT_MAX)
        while not self.done.wait(0.5 if self.shown else first):
            elapsed = time.monotonic() - self.start
            if elapsed < self.after:
                continue
            self.shown = _write(f"\rrrfp: step {self.step}: {self.done_tasks()}/{self.total} "
                                f"tasks, {elapsed:.0f} s ") or self.shown

    def __exit__(self, *exc):
        if self.after is not None:
            self.done.set()
            self.thread.join()
            if self.shown:
                _write("\r" + " " * 60 + "\r")
