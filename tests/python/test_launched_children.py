"""Processes that a process of a job starts in turn (a multiprocessing or DataLoader worker,
forked or spawned, a subprocess) inherit the launcher's environment, and a forked one the
default group: a pipeline over the job's processes is refused there, where under torchrun it
waited for peers that never come and under mpirun a spawned one died in MPI's start-up. And a
default group made without the environment (torch.multiprocessing.spawn's examples) is the
job's: each process ran the whole pipeline in threads."""
import os
import subprocess
import sys

import pytest
import torch

import rrfp
from rrfp import _children

HERE = os.path.dirname(os.path.abspath(__file__))


def build(**kw):
    return rrfp.Pipeline([torch.nn.Linear(4, 4) for _ in range(2)],
                         lambda o, t: (o - t).square().sum(), pp=2, microbatches=2, **kw)


@pytest.mark.parametrize("launcher, variables", [
    ("torchrun", {"TORCHELASTIC_RUN_ID": "x", "WORLD_SIZE": "2", "RANK": "0"}),
    ("mpirun", {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0"})])
@pytest.mark.parametrize("transport", [None, "c10d", "mpi"])
def test_a_child_of_a_launched_process_is_refused_a_pipeline_of_the_job(
        monkeypatch, launcher, variables, transport):
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    # Process 1 took this place in the job (it built a pipeline of the job's processes).
    monkeypatch.setenv(_children.JOB_PID, f"1 {_children._place()}")
    with pytest.raises(ValueError, match=f"transport: this process was started by process 1, "
                                         f"which holds this place in the {launcher} job .*"
                                         "transport='inproc'"):
        build(transport=transport)
    build(transport="inproc").step(torch.ones(4, 4), torch.zeros(4, 4))
    if transport is None:
        # A job started from that process (torchrun or mpirun run again) gives its processes
        # places of their own: refused no more, it goes on to the launcher's count.
        monkeypatch.setenv(_children.JOB_PID, "1 another|place")
        with pytest.raises(ValueError, match=f"transport: {launcher} started 2 process"):
            rrfp.Pipeline([torch.nn.Linear(4, 4)] * 3, lambda o, t: o.sum(), pp=3,
                          microbatches=3)


def test_a_spawned_job_takes_its_default_group_and_its_forked_workers_are_refused(tmp_path):
    package = os.path.dirname(os.path.dirname(os.path.abspath(rrfp.__file__)))
    done = subprocess.run([sys.executable, os.path.join(HERE, "spawned_job.py"),
                           str(tmp_path / "rendezvous")], capture_output=True, text=True,
                          timeout=120, cwd=HERE, env=dict(os.environ, RRFP_PYTHONPATH=package))
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        assert f"rank {rank}: one stage of the job" in done.stdout, done.stdout
