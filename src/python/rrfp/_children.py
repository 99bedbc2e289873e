"""The processes a process of a launched job starts in turn (a multiprocessing or DataLoader
worker, forked or spawned, a subprocess): they inherit the launcher's environment, and a
forked one torch.distributed's default group, but are no process of the job, so a pipeline
over the job's processes is refused there rather than left waiting for peers that never
come."""
import os

from ._launch import _LAUNCHERS, default_group_size

# The variable a process of a launched job sets once it builds a pipeline over the job's
# processes: its pid and its place in the job (the launcher's run and rank). The processes it
# starts in turn (a multiprocessing or DataLoader worker, forked or spawned, a subprocess)
# inherit it with the launcher's variables, and are no process of the job; a job started from
# one of them (torchrun or mpirun run again) gives its processes places of their own.
JOB_PID = "RRFP_JOB_PID"

# What names a launched process's place: the launcher's run (or job) and the rank in it.
_PLACE = ("TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "RANK", "OMPI_COMM_WORLD_RANK",
          "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "PMI_RANK")

# Set in a child forked after `import rrfp` where torch.distributed's default group of several
# processes existed at the fork: the group is its parent's, over its parent's connections.
_inherited_group = False


def _place():
    return "|".join(os.environ.get(name, "") for name in _PLACE)


def watch_forks():
    """At `import rrfp`: a process forked afterwards notes whether it took its parent's default
    group with it."""
    def forked():
        global _inherited_group
        _inherited_group = default_group_size() > 1
    os.register_at_fork(after_in_child=forked)


def claim_job_place(transport):
    """A pipeline over the job's processes (`transport` mpi or c10d) built here: this process
    holds its place in the job, which the processes it starts inherit and may not take."""
    if transport in ("mpi", "c10d") and any(key in os.environ for _, _, key, _ in _LAUNCHERS):
        os.environ[JOB_PID] = f"{os.getpid()} {_place()}"


def _own_group():
    return default_group_size() > 0 and not _inherited_group


def refuse_job_child(transport, group):
    """Refuses a pipeline of a job's processes (transport None, "c10d" or "mpi", no group given)
    in a process that a process of the job started after taking its place in the job: under
    torchrun it waited for peers that never come (torch's 30 minutes, past `arrival_timeout`);
    under mpirun a spawned one died in MPI's start-up and the job failed at its end. A process
    that made a default group of its own passes. ValueError naming transport='inproc'."""
    if transport == "inproc" or group is not None:
        return
    owner, _, place = os.environ.get(JOB_PID, "").partition(" ")
    launcher = next((name for _, name, key, _ in _LAUNCHERS if key in os.environ), None)
    if (launcher and owner and owner != str(os.getpid()) and place == _place()
            and not _own_group()):
        raise ValueError(
            f"transport: this process was started by process {owner}, which holds this place "
            f"in the {launcher} job (a multiprocessing or DataLoader worker, or a subprocess, "
            "inherits its environment), and is no process of that job: a pipeline over the "
            "job's processes would wait here for peers that never come; pass "
            "transport='inproc' to run every stage as a thread of this process (or, for a job "
            "of its own, make its default group first, or pass group=)")
    if _inherited_group and transport in (None, "c10d"):
        raise ValueError(
            "transport: this process was forked from one whose torch.distributed default group "
            "it inherited; that group is its parent's, whose connections it shares: pass "
            "transport='inproc' to run every stage as a thread of this process")
