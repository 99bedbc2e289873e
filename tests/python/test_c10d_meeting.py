"""The meeting of a c10d pipeline's processes over a group of the caller's (rrfp._c10d._meet):
every process comes to build its Pipeline within arrival_timeout, or every process raises,
naming those that did not come, before any group is made or compared. Processes are threads
here, each with its own view of torch.distributed over one real store of torch's, and two real
processes at the end."""
import os
import socket
import subprocess
import sys
import threading
import types

import pytest

import ports

dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not built in", allow_module_level=True)

from rrfp import _c10d  # noqa: E402


class Process:
    """torch.distributed as process `rank` of `world` sees it, its default store `store`."""

    def __init__(self, rank, world, store):
        self.rank, self.world = rank, world
        self.distributed_c10d = types.SimpleNamespace(_get_default_store=lambda: store)

    def get_rank(self, group=None):
        return self.rank

    def get_process_group_ranks(self, group):
        return list(range(self.world))


def meet(store, world, ranks, arrival):
    """The processes `ranks` of `world` meet, each in a thread, over `store`, each with the
    limit `arrival` (or arrival[rank]): rank -> None where it met, else the RuntimeError's
    text. Each must end within 30 s."""
    said = {}

    def one(rank):
        limit = arrival[rank] if isinstance(arrival, dict) else arrival
        try:
            _c10d._meet(Process(rank, world, store), object(), limit)
            said[rank] = None
        except RuntimeError as e:
            said[rank] = str(e)
    threads = [threading.Thread(target=one, args=(r,)) for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
        assert not t.is_alive(), "a meeting did not end"
    return said


@pytest.fixture
def store(monkeypatch):
    monkeypatch.setattr(_c10d, "_MET", {})  # each test's meetings count from 0
    return dist.HashStore()


def test_processes_that_all_come_meet(store):
    assert meet(store, 3, [0, 1, 2], 30.0) == {0: None, 1: None, 2: None}
    assert meet(store, 3, [2, 1, 0], 30.0) == {0: None, 1: None, 2: None}  # the second, again


def test_a_process_that_never_comes_is_named_by_every_other(store):
    # 2 s: both that come must have come before the first gives up, on a loaded machine too.
    said = meet(store, 3, [0, 1], 2.0)
    # The wait named as what it is: a timeout longer than arrival_timeout is waited (it said
    # "arrival_timeout ... (10 s here)" of an arrival_timeout of 5 and a timeout of 10).
    assert said == {r: "transport c10d: process(es) 2 of the 3 of the group did not come to build "
                       "their Pipeline within the arrival_timeout (or timeout where longer) of a "
                       "process that waited (2 s here): each must build it, in the same order"
                    for r in (0, 1)}


def test_one_coming_after_the_others_gave_up_is_refused_and_the_next_try_meets(store):
    # The late one's key came after the first process to give up had written the outcome: it
    # does as the others did (with a wait on the store, it passed and waited in the layout's
    # gather for the others, who had raised). Each process's second construction meets the
    # others' second.
    assert all(meet(store, 3, [0, 1], 2.0).values())  # both refused
    said = meet(store, 3, [2], 30.0)
    assert said == {2: "transport c10d: this process (rank 2) came to build its Pipeline after "
                       "another of the group's 3 had waited its arrival_timeout (or timeout "
                       "where longer) for process(es) 2: each must build it within the others' "
                       "arrival_timeout, in the same order"}
    assert meet(store, 3, [0, 1, 2], 30.0) == {0: None, 1: None, 2: None}


def test_a_wait_under_a_millisecond_ends(store):
    # A store's wait of 0 ms is a wait without a limit: the meeting polls, against a deadline
    # of its own.
    said = meet(store, 2, [0], 0.0005)
    assert said[0].startswith("transport c10d: process(es) 1 of the 2 of the group did not come")


def test_a_process_without_an_arrival_limit_meets_too(store):
    # A limit of 0 is torch's 30 minutes, not "no meeting": a process that skipped the meeting
    # left the one with a limit waiting in it, which then named it as not come.
    assert meet(store, 2, [0, 1], {0: 0.0, 1: 2.0}) == {0: None, 1: None}
    # Late to a meeting the other gave up on, it does as that one did.
    assert meet(store, 2, [1], 0.5)[1].startswith("transport c10d: process(es) 0 of the 2")
    said = meet(store, 2, [0], 0.0)
    assert said[0].startswith("transport c10d: this process (rank 0) came to build its "
                              "Pipeline after another"), said


def two_processes():
    """This folder (lm.py's) and the environment of a job of two processes on this machine,
    torchrun's variables but the rank, which each process adds."""
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(ports.free_port()),
               PYTHONPATH=os.pathsep.join(os.path.abspath(p) for p in sys.path if p))
    env.pop("TORCHELASTIC_RUN_ID", None)
    return here, env


def run_both(script, timeout):
    """`script` (python -c, its argument the rank) as both processes of a job: the processes
    and each one's (stdout, stderr), each ended within `timeout` seconds."""
    here, env = two_processes()
    procs = [subprocess.Popen([sys.executable, "-c", script, str(r)], cwd=here,
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in (0, 1)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=timeout))
    finally:
        for p in procs:
            p.kill()
            p.wait()
    return procs, outs


def test_a_process_of_a_callers_group_that_never_builds_its_pipeline_fails_the_others_in_time():
    # Two processes make torch.distributed's default group themselves, as a script using DDP
    # does; process 1 never builds its Pipeline. Process 0 is told so within arrival_timeout:
    # it waited in the layout's gather for the group's timeout, torch's 30 minutes.
    here, env = two_processes()
    builds = ("import torch.distributed as dist, rrfp, lm\n"
              "dist.init_process_group('gloo')\n"
              "rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, microbatches=4, timeout=1,\n"
              "              arrival_timeout=2)\n")
    stays = ("import time, torch.distributed as dist\n"
             "dist.init_process_group('gloo')\n"
             "time.sleep(300)\n")
    other = subprocess.Popen([sys.executable, "-c", stays], cwd=here,
                             env=dict(env, RANK="1", LOCAL_RANK="1"),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # subprocess.run's timeout bounds a hang; the message says the 2 s ended the wait.
        done = subprocess.run([sys.executable, "-c", builds], cwd=here,
                              env=dict(env, RANK="0", LOCAL_RANK="0"),
                              capture_output=True, text=True, timeout=150)
    finally:
        other.kill()
        other.wait()
    assert done.returncode != 0
    assert "RuntimeError: transport c10d: process(es) 1 of the 2 of the group did not come to " \
        "build their Pipeline within the arrival_timeout (or timeout where longer) of a " \
        "process that waited (2 s here)" in done.stderr, done.stderr[-2000:]


def test_a_process_joining_a_port_that_answers_not_as_a_store_is_told_in_time():
    # Process 1 of a job started with torch.distributed's variables, no torchrun: what listens
    # at MASTER_PORT is another program, which never answers. torch's store constructor awaited
    # that answer without a limit, holding the GIL: the process stayed until killed.
    here, env = two_processes()
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(4)
    port = holder.getsockname()[1]
    builds = ("import rrfp, lm\n"
              "rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, microbatches=4, timeout=1,\n"
              "              arrival_timeout=2)\n")
    try:
        done = subprocess.run([sys.executable, "-c", builds], cwd=here,
                              env=dict(env, RANK="1", LOCAL_RANK="1", MASTER_PORT=str(port)),
                              capture_output=True, text=True, timeout=120)
    finally:
        holder.close()
    assert done.returncode != 0
    assert (f"RuntimeError: transport c10d: the process group could not form at 127.0.0.1:{port} "
            f"(MASTER_ADDR:MASTER_PORT): nothing there answered as a store within 2 s: the port "
            f"is another program's, or the store's host is stopped") in done.stderr, \
        done.stderr[-2000:]


def test_processes_whose_limits_differ_form_the_group_and_meet():
    # Limits may differ between processes (python.md). Without a group of the caller's, one
    # with timeout=0 (no arrival limit) joined the store by torch's init_process_group alone,
    # and stayed in it once the other, joining rrfp's way, had given up on it.
    script = ("import sys, rrfp, lm\n"
              "limits = [dict(timeout=0), dict(timeout=5, arrival_timeout=10)]\n"
              "pipe = rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, microbatches=2,\n"
              "                     **limits[int(sys.argv[1])])\n"
              "xs, ys = lm.batches(2)\n"
              "print('loss', float(pipe.step(xs, ys)))\n")
    procs, outs = run_both(script, 120)
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and out.startswith("loss "), err[-2000:]
    assert outs[0][0] == outs[1][0]


def test_a_group_passed_by_some_processes_alone_is_refused_on_every_one():
    # Process 0 passes a Gloo group of its own over both ranks, process 1 none (the default
    # group, the same ranks): they met, then each gathered over its own group and waited for
    # the other there, for torch's 30 minutes.
    script = ("import sys, torch.distributed as dist, rrfp, lm\n"
              "dist.init_process_group('gloo')\n"
              "mine = dist.new_group([0, 1], backend='gloo')\n"
              "group = mine if sys.argv[1] == '0' else None\n"
              "try:\n"
              "    rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, microbatches=4, timeout=5,\n"
              "                  arrival_timeout=10, group=group)\n"
              "except ValueError as e:\n"
              "    print('ValueError:', e)\n")
    _, outs = run_both(script, 60)  # a hang fails there, in a minute
    for out, err in outs:
        assert "ValueError: group: process(es) [0] passed a group of their own and " \
            "process(es) [1] the default group (group=None)" in out, (out + err)[-2000:]


def test_a_process_that_ends_while_the_groups_are_made_fails_the_others_in_time():
    # Both met; process 1 then ends inside new_group of the pipeline's first group, the
    # messages' (made as the others wait for it there). That group's timeout was a year, its
    # messages' waits being the transport's to bound: process 0 waited in it that long. It is
    # made within arrival_timeout now.
    script = ("import os, sys, torch.distributed as dist, rrfp, lm\n"
              "if sys.argv[1] == '1':\n"
              "    dist.new_group = lambda *args, **kw: os._exit(3)\n"
              "try:\n"
              "    rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, microbatches=2, timeout=1,\n"
              "                  arrival_timeout=2)\n"
              "except RuntimeError as e:\n"
              "    print('RuntimeError:', e)\n")
    procs, outs = run_both(script, 90)  # a hang fails there
    assert procs[1].returncode == 3
    out, err = outs[0]
    assert "RuntimeError: transport c10d: making the pipeline's Gloo group over ranks [0, 1] " \
        "failed: every process of the job makes it, and one did not" in out, (out + err)[-2000:]
