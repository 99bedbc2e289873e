"""The processes a process of a launched job starts in turn (a multiprocessing or DataLoader
worker, forked or spawned, a subprocess): they inherit the launcher's environment, and a
forked one torch.distributed's default group, but are no process of the job, so a pipeline
over the job's processes is refused there rather than left waiting for peers that never
come."""
import os
import sys

from ._launch import _LAUNCHERS

# The variable a process started by a launcher sets at `import rrfp`: its pid. The processes it
# starts in turn (a multiprocessing or DataLoader worker, forked or spawned, a subprocess)
# inherit it with the launcher's variables, and are no process of the job.
JOB_PID = "RRFP_JOB_PID"

# Set in a child forked after `import rrfp` where torch.distributed's default group of several
# processes existed at the fork: the group is its parent's, over its parent's connections.
_inherited_group = False


def note_job_process():
    """At `import rrfp`: a process of a launched job records its pid for its children, and one
    forked notes whether it took its parent's default group with it."""
    env = os.environ
    if JOB_PID not in env and any(key in env for _, _, key, _ in _LAUNCHERS):
        env[JOB_PID] = str(os.getpid())

    def forked():
        global _inherited_group
        dist = sys.modules.get("torch.distributed")
        _inherited_group = bool(dist and dist.is_available() and dist.is_initialized()
                                and dist.get_world_size() > 1)
    os.register_at_fork(after_in_child=forked)


def refuse_job_child(transport, group):
    """Refuses a pipeline of a job's processes (transport None, "c10d" or "mpi", no group given)
    in a process that a process of the job started: under torchrun it waited for peers that
    never come (torch's 30 minutes, past `arrival_timeout`); under mpirun a spawned one died in
    MPI's start-up and the job failed at its end. ValueError naming transport='inproc'."""
    if transport == "inproc" or group is not None:
        return
    owner = os.environ.get(JOB_PID)
    launcher = next((name for _, name, key, _ in _LAUNCHERS if key in os.environ), None)
    if launcher and owner is not None and owner != str(os.getpid()):
        raise ValueError(
            f"transport: this process was started by process {owner}, one of those {launcher} "
            "started (as a multiprocessing or DataLoader worker, or a subprocess), and "
            "inherited its environment, but is no process of that job: a pipeline over the "
            "job's processes "
            "would wait here for peers that never come; pass transport='inproc' to run every "
            "stage as a thread of this process")
    if _inherited_group and transport in (None, "c10d"):
        raise ValueError(
            "transport: this process was forked from one whose torch.distributed default group "
            "it inherited; that group is its parent's, whose connections it shares: pass "
            "transport='inproc' to run every stage as a thread of this process")
