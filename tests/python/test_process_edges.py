"""A pipeline among the things a training script's process does: a Ctrl-C that comes as the
step ends, the interpreter exiting while a daemon thread steps, a process forked while a step
runs, and no stderr. Each once went wrong: a StageError for the Ctrl-C, which loops that skip a
failed batch went past; a crash (the runtime freed under its threads); a child that never
exited; an AttributeError from Pipeline()."""
import os
import signal
import subprocess
import sys

import pytest
import torch
from torch import nn

import rrfp

_PATH = os.path.dirname(os.path.dirname(os.path.abspath(rrfp.__file__)))


def run_script(code, timeout=60, **kwargs):
    env = dict(os.environ, PYTHONPATH=_PATH)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def interrupting(stage, kind, chunk, mb):
    # The step's first task sends the signal: its handler runs on the main thread, at the
    # latest as the step's losses are added, the first Python it runs after the tasks.
    if (kind, chunk, mb) == ("F", 0, 0):
        os.kill(os.getpid(), signal.SIGINT)
    return 0


@pytest.mark.parametrize("call", ["step", "eval_step"])
def test_a_ctrl_c_as_the_step_ends_is_raised_as_keyboardinterrupt(call):
    torch.manual_seed(0)
    chunks = [nn.Linear(8, 8), nn.Linear(8, 8)]
    pipe = rrfp.Pipeline(chunks, lambda y, t: y.sum(), pp=2, microbatches=2,
                         delay_fn=interrupting, timeout=60, progress=None)
    before = [p.grad for c in chunks for p in c.parameters()]
    for _ in range(5):
        with pytest.raises(KeyboardInterrupt):
            getattr(pipe, call)(torch.randn(4, 8))
    assert [p.grad for c in chunks for p in c.parameters()] == before  # no step's gradients written
    pipe = rrfp.Pipeline([nn.Linear(8, 8), nn.Linear(8, 8)], lambda y, t: y.sum(), pp=2,
                         microbatches=2, timeout=60, progress=None)
    assert torch.isfinite(pipe.step(torch.randn(4, 8)))


def test_the_interpreter_exits_while_a_daemon_thread_steps():
    # The exit handler freed the runtime under the step's threads: exit 139 or 134, 6 of 6.
    # Now it cancels the step and waits for it to leave. (A daemon thread inside a torch call
    # as the interpreter ends aborts it, with or without rrfp: "terminate called without an
    # active exception".)
    code = """if True:
        import threading, time, torch, torch.nn as nn, rrfp
        pipe = rrfp.Pipeline([nn.Linear(8, 8), nn.Linear(8, 8)], lambda y, t: y.sum(), pp=2,
                             microbatches=2, delay_fn=lambda *a: 0.05, progress=None)
        started, x = threading.Event(), torch.randn(4, 8)
        def train():
            try:
                while True:
                    started.set()
                    pipe.step(x)
            except RuntimeError as e:  # no torch call after it: torch's own abort at exit
                print(e, flush=True)
                threading.Event().wait()
        threading.Thread(target=train, daemon=True).start()
        started.wait()
        time.sleep(0.3)
        print("leaving")
    """
    for _ in range(3):
        done = run_script(code)
        assert done.returncode == 0 and done.stdout.startswith("leaving\n"), done.stderr[-2000:]


def test_a_child_forked_while_a_step_runs_exits():
    # It never did: its exit destroyed the runtime, waiting for the parent's threads. Nor
    # does it wait for the step the parent's thread holds the pipeline for.
    code = """if True:
        import os, sys, threading, time, torch, torch.nn as nn, rrfp
        pipe = rrfp.Pipeline([nn.Linear(8, 8), nn.Linear(8, 8)], lambda y, t: y.sum(), pp=2,
                             microbatches=2, delay_fn=lambda *a: 0.2, progress=None)
        stepping, stop = threading.Event(), threading.Event()
        def train():
            while not stop.is_set():
                stepping.set()
                pipe.step(torch.randn(4, 8))
        t = threading.Thread(target=train)
        t.start()
        stepping.wait()
        time.sleep(0.1)
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            sys.exit(0)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            got, status = os.waitpid(pid, os.WNOHANG)
            if got:
                print("child", os.waitstatus_to_exitcode(status),
                      round(time.monotonic() - start) < 5)  # within seconds
                break
            time.sleep(0.05)
        else:
            os.kill(pid, 9)
            print("child hung")
        stop.set()
        t.join()
    """
    done = run_script(code)
    assert done.stdout == "child 0 True\n", (done.stdout, done.stderr[-2000:])


@pytest.mark.parametrize("stderr", ["None", "write-only"])
def test_a_pipeline_runs_without_a_terminal_stderr(stderr):
    # progress="auto" asked stderr.isatty(): AttributeError with no stderr (closed, pythonw)
    # or a logger's tee that only writes; the progress line itself is left out there.
    code = f"""if True:
        import sys, torch, torch.nn as nn, rrfp
        class Tee:
            def write(self, text):
                pass

            def flush(self):
                pass
        sys.stderr = None if {stderr!r} == "None" else Tee()
        for progress in ("auto", 0):
            pipe = rrfp.Pipeline([nn.Linear(8, 8), nn.Linear(8, 8)], lambda y, t: y.sum(),
                                 pp=2, microbatches=2, progress=progress,
                                 delay_fn=lambda *a: 0.02)
            print(bool(torch.isfinite(pipe.step(torch.randn(4, 8)))))
    """
    done = run_script(code)
    assert done.returncode == 0 and done.stdout == "True\nTrue\n", done.stderr[-2000:]
