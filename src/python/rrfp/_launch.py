"""How a pipeline's processes were started and how they connect: the launcher's transport,
torch.distributed's groups, and what every process must agree on."""
import hashlib
import json
import os
import sys

import torch

from . import _rrfp
from ._calls import gather

# The dtypes whose every value a double holds exactly: a loss or a norm sent between processes
# as a double (the job's all-gather carries doubles) with its dtype's index here comes back bit
# for bit.
EXACT_IN_DOUBLE = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


# How each launcher says it started this process: (transport, launcher, the variable that is
# set, the variable that holds the process count), looked at in this order (torchrun started
# by srun is torchrun's job).
_LAUNCHERS = (("mpi", "mpirun", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"),
              ("mpi", "mpirun", "PMI_SIZE", "PMI_SIZE"),
              ("c10d", "torchrun", "TORCHELASTIC_RUN_ID", "WORLD_SIZE"))

# The largest count a launcher's variable may hold: a C int's, as MPI's ranks and sizes are.
_ENV_INT_MAX = 2**31 - 1


def env_int(env, name, what, by, least=0, absent=None):
    """The whole number the environment variable `name` holds (`absent` where it is unset):
    decimal digits, blanks around them ignored, from `least` to 2**31 - 1. Anything else is
    refused, naming the variable and `what` it should be, set `by` whom (ValueError). Every
    launcher's variable is read so: int() alone named the value but not the variable and took
    '+4' or '1_000', and a test of str.isdigit() refused ' 4', which int() took, so a refusal
    behind it was skipped silently."""
    if name not in env:
        return absent
    raw = env[name]
    text = raw.strip()
    # The length first: int() refuses over 4300 digits with a message of its own.
    if text.isascii() and text.isdigit() and len(text) <= len(str(_ENV_INT_MAX)):
        value = int(text)
        if least <= value <= _ENV_INT_MAX:
            return value
    shown = raw if len(raw) <= 30 else raw[:30] + "..."
    raise ValueError(f"environment variable {name}: {shown!r} is not {what} (decimal digits, "
                     f"{least} to {_ENV_INT_MAX}); it is set by {by}")


def _refuse_srun(env):
    """Slurm's srun starting several tasks of this script: the MPI transport's processes come
    from mpirun, so each task would have run the whole pipeline in threads, N trainings where
    one was meant (writing the same checkpoints). A step of one task (an interactive srun on a
    node) runs stages as threads, as without srun."""
    tasks = env_int(env, "SLURM_STEP_NUM_TASKS", "a whole number of tasks",
                    "the launcher (srun)", least=1, absent=1)
    if tasks > 1:
        raise ValueError(
            f"transport: srun started {tasks} tasks of this script, which rrfp cannot join into "
            "one job; inside the allocation start one process per stage with mpirun (mpirun "
            "-np N python script.py) or torchrun (srun torchrun ..., one per node), or pass "
            "transport='inproc' to run every stage as a thread of each task")


def _other_count(started, pp, dp):
    """The refusal of a launcher that `started` another number of processes than pp * dp."""
    return ValueError(f"transport: {started}, but pp={pp} x dp={dp} needs {pp * dp}; start "
                      f"{pp * dp}, or pass transport='inproc' to run every stage as a thread of "
                      "each process")


def default_group_size():
    """How many processes torch.distributed's default group holds (0: none is made), without
    importing torch.distributed where nothing has (at a fork, say)."""
    dist = sys.modules.get("torch.distributed")
    return dist.get_world_size() if dist and dist.is_available() and dist.is_initialized() else 0


def launched_transport(pp, dp, group):
    """The transport that matches how this process was started: "mpi" under mpirun (Open MPI
    or MPICH), "c10d" under torchrun, in torch.distributed's environment of several processes
    or with a torch.distributed group, else "inproc".
    Refuses a launcher whose process count is not pp * dp (each process would otherwise run a
    whole pipeline of its own), and srun with several tasks."""
    env = os.environ
    if group is not None:
        return "c10d"
    for name, launcher, key, count in _LAUNCHERS:
        if key in env:
            world = env_int(env, count, "a whole number of processes",
                            f"the launcher ({launcher})", least=1, absent=1)
            if world != pp * dp:
                raise _other_count(f"{launcher} started {world} process(es)", pp, dp)
            return name
    # A default group of several processes made without the environment (init_method and
    # rank given, as torch.multiprocessing.spawn's examples do): each process ran the whole
    # pipeline in threads, N trainings where one was meant, racing on one checkpoint.
    world = default_group_size()
    if world > 1:
        if world != pp * dp:
            raise _other_count(f"torch.distributed's default group holds {world} processes",
                               pp, dp)
        return "c10d"
    # torch.distributed's environment set by another launcher than torchrun (a cluster's, by
    # hand): each process ran the whole pipeline in threads, N trainings where one was meant.
    # WORLD_SIZE unset (or MASTER_ADDR, RANK) names no job of several processes.
    said = "the launcher (torchrun, mpirun, srun) or by hand, as torch.distributed's environment"
    world = 1
    if "MASTER_ADDR" in env and "RANK" in env:
        world = env_int(env, "WORLD_SIZE", "a whole number of processes", said, least=1,
                        absent=1)
    if world > 1:
        # Refused here as WORLD_SIZE is: torch's own int() names the value alone.
        env_int(env, "RANK", "a rank (a whole number)", said)
        if world != pp * dp:
            raise _other_count("torch.distributed's environment (RANK, WORLD_SIZE, MASTER_ADDR) "
                               f"names {world} processes", pp, dp)
        return "c10d"
    _refuse_srun(env)
    return "inproc"


def agreed(core, fn, message, call):
    """fn()'s result. With a process per stage, what fn raises on one process is told to every
    other, which raises RuntimeError(message, with {bad} the failed processes' ranks): the
    others would otherwise go on into the next collective and wait there until their
    timeout. `call`: the call it is part of and the steps before it (_calls.gather)."""
    return agreed_values(core, fn, message, lambda out: 0.0, call)[0]


def agreed_any(core, fn, message, call):
    """Whether fn() returned something true on any process of the job (core None: this
    process alone), failures told to every process as agreed() tells them, in the same
    gather."""
    _, every = agreed_values(core, fn, message, lambda out: 1.0 if out else 0.0, call)
    return any(v > 0 for v in every)


def agreed_values(core, fn, message, value, call):
    """(fn()'s result, every process's value(result)), a failure counting as -1 and raised on
    every process (agreed). Processes making different calls raise that instead, on every
    process alike, this one's own failure chained."""
    out, rows = agreed_rows(core, fn, message, lambda out: [value(out)], call)
    return out, [v[0] if v else 0.0 for v in rows]


def agreed_rows(core, fn, message, values, call):
    """agreed_values with several values a process: values(result), a list whose first is not
    negative; a failure's row is [-1]."""
    failed, out = None, None
    try:
        out = fn()
    except BaseException as e:  # noqa: BLE001 (re-raised below, after the job agrees)
        failed = e  # KeyboardInterrupt too: the others are told, not left in the gather
    mine = [-1.0] if failed is not None else [float(v) for v in values(out)]
    rows = [mine]
    if core is not None and core.world > 1:
        try:
            rows = gather(core, call, mine)
        except RuntimeError as e:
            if failed is None:
                raise
            raise e from failed
        bad = [r for r, v in enumerate(rows) if not v or v[0] < 0]
        if bad and failed is None:
            raise RuntimeError(message.format(bad=bad))
    if failed is not None:
        raise failed
    return out, rows


def agree_options(core, options):
    """Refuses, on every process of the job alike (ValueError), options that differ between its
    processes: {name: value as given}. Each process runs its own schedule from them, and
    processes of different schedules broke mid-step or after it: another split backward sent W
    tasks the others' step records had no room for (a heap overflow), another comm or hint
    broke the protocol or deadlocked until the timeout, other microbatch counts were taken
    for different batches, another seed drew other dropout silently. A hint file is compared
    by its contents, as each process reads its own copy."""
    if core is None or core.world <= 1:
        return
    mine = {name: _compared(name, value) for name, value in options.items()}
    raw = json.dumps(mine).encode()
    every = [json.loads(t.numpy().tobytes().decode())
             for t in core.all_gather_bytes(torch.frombuffer(bytearray(raw), dtype=torch.uint8))]
    _refuse_differences(options, every)


def _refuse_differences(names, every):
    """The ValueError of agree_options where the processes' {name: [compared, shown]}
    (`every`, by rank) differ in any of `names`; the same on every process, which each raises
    from the same gathered values."""
    said, missing = [], [None, "nothing"]
    for name in names:
        first = every[0].get(name, missing)
        other = next((r for r, theirs in enumerate(every)
                      if theirs.get(name, missing)[0] != first[0]), None)
        if other is not None:
            theirs = every[other].get(name, missing)
            said.append(f"{name}: process 0 gave {first[1]}, process {other} gave {theirs[1]}")
    if said:
        raise ValueError("; ".join(said) + " (every process of a job must build its Pipeline "
                         "with the same options, as each runs its own copy of the schedule)")


def _compared(name, value):
    """(what is compared, what a refusal shows) of an option's value."""
    shown = os.fsdecode(value) if isinstance(value, bytes) else value  # a file name of bytes
    # A hint file as the core tells one from a name: any file there but a hint's own name (a
    # plan written to best.plan, whose bytes went uncompared).
    if name == "hint" and shown not in _rrfp.hint_names() and os.path.isfile(value):
        with open(value, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        return f"file {digest}", f"{value!r} (a hint file, sha256 {digest[:12]})"
    return repr(value), repr(value)


def c10d_groups(group, pp, dp, timeout=0.0, arrival=0.0):
    """The PipelineCore's groups of this process (its keyword arguments): `group`, its
    pipeline's, `collectives` and `arrivals` beside it, and with dp > 1 `dp_group` and
    `arrival_replicas`, its stage's across the replicas: Gloo groups over `group`'s ranks
    (default: the default group, made from torchrun's environment, every process joining
    within `arrival` seconds, 0: torch's 30 minutes), rank r of which is replica r // pp,
    stage r % pp.
    Every process makes every subgroup, in the same order (torch.distributed.new_group
    requires it).

    Gloo ends a wait only at its group's timeout, and closes every connection of the group then.
    The barrier, gathers and exchanges run on groups whose timeout is `timeout`: a collective
    left running after a failed step held the process's exit for torch's 30 minutes. The
    gathers where the processes meet at a call (_calls.gather), after what each did alone
    between calls, run on groups whose timeout is `arrival`: one pausing alone between steps
    for longer than `timeout` failed the others' next step, and Gloo closed the groups. The
    pipeline's messages run on groups whose timeout outlasts any pause between steps
    (_messages_group): their receives stay posted between steps. A Gloo subgroup of the
    caller's is used for all as it is: the processes outside it would make no other."""
    import torch.distributed as dist
    if group is None:
        if not dist.is_initialized():
            _init_default_group(dist, arrival)
        group = dist.group.WORLD
    _refuse_subgroup_of_another_backend(dist, group)  # the subgroups below are Gloo's anyway
    if dist.get_backend(group) == "gloo":
        _agree_layout(dist, group, pp, dp)
        host = None
    else:
        # The default group of NCCL, say, carries CUDA tensors alone: compared over the Gloo
        # group of its ranks that dp=1 keeps as its own (every process makes it first, whatever
        # its pp and dp; with dp > 1 it is left unused).
        host = _messages_group(dist, group_ranks(dist, group))
        _agree_layout(dist, host, pp, dp)
    if dp == 1:
        if group is not dist.group.WORLD:  # a Gloo subgroup (the docs ask for one of its own)
            return dict(group=group)
        # The default group gets groups of the pipeline's own over its ranks: the pipeline's
        # receives, posted between steps, took the caller's own point-to-point messages of the
        # default group (a dist.recv then waited for ever), and NCCL carries no host memory.
        ranks = group_ranks(dist, group)
        pipe = host if host is not None else _messages_group(dist, ranks)
        return dict(group=pipe, collectives=_bounded(dist, ranks, timeout),
                    arrivals=_arrivals(dist, ranks, arrival))
    world = dist.get_world_size(group)
    if world != pp * dp:
        raise ValueError(f"dp: {world} processes are not pp * dp = {pp} * {dp}")
    if group is not dist.group.WORLD and world != dist.get_world_size():
        # The replicas' groups are made by new_group, which every process of the job must call:
        # the processes outside the caller's subgroup never would.
        raise ValueError(f"group: with dp={dp} the pipeline makes its replicas' groups, which "
                         "takes every process of the job; this group holds "
                         f"{world} of {dist.get_world_size()} (pass the default group)")
    ranks = group_ranks(dist, group)
    me = dist.get_rank(group)
    pipes = [[ranks[r * pp + s] for s in range(pp)] for r in range(dp)]
    stages = [[ranks[r * pp + s] for r in range(dp)] for s in range(pp)]
    made = ([_messages_group(dist, g) for g in pipes], [_bounded(dist, g, timeout) for g in pipes],
            [_bounded(dist, g, timeout) for g in stages],
            [_arrivals(dist, g, arrival) for g in pipes],
            [_arrivals(dist, g, arrival) for g in stages])
    return dict(group=made[0][me // pp], collectives=made[1][me // pp],
                dp_group=made[2][me % pp], arrivals=made[3][me // pp],
                arrival_replicas=made[4][me % pp])


def release_groups_with(owner, core, groups, given):
    """Leaves the groups c10d_groups made (`groups`, but the caller's own `given` one) to be
    destroyed when `owner`, the Pipeline, goes, once `core` (its PipelineCore, None where it
    could not be built: then at once) has closed its runtime, whose receives stay posted on
    them: torch's registry held every group for ever, and each pipeline built and freed kept
    its groups' sockets and Gloo's threads (6 descriptors and 9 threads at 2 processes), until
    a script building one per evaluation ran out of files."""
    import weakref
    made = list({id(g): g for g in groups.values() if g is not None and g is not given}.values())
    if not made:
        return
    if core is None:
        _destroy_groups(made, os.getpid(), None)
        return
    weakref.finalize(owner, _destroy_groups, made, os.getpid(), core).atexit = False


def _destroy_groups(made, pid, core):
    try:
        import torch.distributed as dist
    except Exception:  # a pipeline freed as the interpreter ends, its imports gone: nothing to do
        return
    # A forked process's copies are its parent's: left as they are.
    if pid != os.getpid() or not (dist.is_available() and dist.is_initialized()):
        return
    if core is not None:
        core.close()
    for g in made:
        try:
            dist.destroy_process_group(g)
        except RuntimeError as e:  # destroyed already (destroy_process_group() of all, say)
            if "invalid process group" not in str(e).lower():
                raise


# A year: longer than any pause between two steps of a job (an evaluation, a checkpoint's
# upload), shorter than what Gloo's deadlines (steady clock plus timeout, in nanoseconds) hold.
_MESSAGES_TIMEOUT_DAYS = 365


def _messages_group(dist, ranks):
    """A Gloo group over `ranks` for the pipeline's messages. Its receives stay posted between
    steps, and Gloo fails a wait at its group's timeout and closes every connection of the
    group: under torch's 30 minutes, a pause between steps longer than that failed every later
    step ("Application timeout caused pair closure"). A step that stops making progress is the
    pipeline's `timeout` to catch, not this group's."""
    import datetime
    return dist.new_group(ranks, timeout=datetime.timedelta(days=_MESSAGES_TIMEOUT_DAYS),
                          backend="gloo")


def _bounded(dist, ranks, timeout):
    """A Gloo group over `ranks` whose operations end within `timeout` seconds (0: torch's
    own timeout; made all the same, so that every process makes the same groups whatever its
    `timeout`, which the processes need not agree on)."""
    if timeout <= 0:
        return dist.new_group(ranks, backend="gloo")
    import datetime
    # At least a millisecond, as the core rounds the pipeline's up to (torch would take 0).
    return dist.new_group(ranks, timeout=datetime.timedelta(seconds=max(timeout, 1e-3)),
                          backend="gloo")


def _arrivals(dist, ranks, arrival):
    """A Gloo group over `ranks` for the gathers where the processes meet at a call, whose
    operations end within `arrival` seconds (0: no limit, as the messages' groups)."""
    return _bounded(dist, ranks, arrival) if arrival > 0 else _messages_group(dist, ranks)


def _agree_layout(dist, group, pp, dp):
    """Refuses, on every process of `group` alike, a pp or dp that differs between them (as
    agree_options words it), before the subgroups they lay out are made: each process makes
    the subgroups of its own pp and dp, and new_group waits until every process makes the same,
    so processes of pp=2, dp=1 and of pp=1, dp=2 waited in it for ever (no timeout applies
    there), before the options were compared."""
    mine = {name: _compared(name, value) for name, value in (("pp", pp), ("dp", dp))}
    every = [None] * dist.get_world_size(group)
    dist.all_gather_object(every, mine, group=group)
    _refuse_differences(mine, every)


def _init_default_group(dist, timeout):
    """The default group from torchrun's environment (RANK, WORLD_SIZE, ...), every process
    joining within the pipeline's arrival_timeout (`timeout` here; 0: torch's own 30 minutes).
    Only the joining is bounded so: the group stays the caller's, with torch's timeout (the
    pipeline runs on groups of its own, c10d_groups)."""
    if timeout <= 0:
        dist.init_process_group("gloo")
        return
    import datetime
    import time
    world = os.environ.get("WORLD_SIZE", "?")
    # From before the rendezvous: on the process that hosts the store, torch's waits out its
    # timeout for the others and returns all the same, and the join counted a second one.
    deadline = time.monotonic() + timeout
    try:
        store, rank, size = next(dist.rendezvous(
            "env://", timeout=datetime.timedelta(seconds=timeout)))
        store.set_timeout(datetime.timedelta(seconds=timeout))
        store.add("rrfp/joined", 1)
        while store.add("rrfp/joined", 0) < size:
            if time.monotonic() > deadline:
                raise TimeoutError("not every process joined the store")
            time.sleep(0.005)
    except (RuntimeError, TimeoutError, ValueError) as e:
        said = str(e)
        if isinstance(e, TimeoutError) or "timeout" in said.lower() or "timed out" in said:
            raise RuntimeError(
                f"transport c10d: the {world} processes of the job did not all join within "
                f"{timeout:g} s (arrival_timeout): each must build its Pipeline; torch says: "
                f"{said}") \
                from e
        raise RuntimeError(f"transport c10d: the process group could not form: {said}") from e
    store.set_timeout(datetime.timedelta(minutes=30))  # torch's default, for what follows
    dist.init_process_group("gloo", store=store, rank=rank, world_size=size)


def group_ranks(dist, group):
    """The global ranks of `group`'s members, by their rank in it."""
    if hasattr(dist, "get_process_group_ranks"):
        return dist.get_process_group_ranks(group)
    table = dist.distributed_c10d._pg_group_ranks.get(group)  # torch 1.13: global -> group rank
    if table:
        return [g for g, _ in sorted(table.items(), key=lambda kv: kv[1])]
    return list(range(dist.get_world_size(group)))


def _refuse_subgroup_of_another_backend(dist, group):
    if group is not dist.group.WORLD and dist.get_backend(group) != "gloo":
        # new_group needs every process of the job, and only this group's build the pipeline.
        raise ValueError(f"group: a {dist.get_backend(group)} group other than the default one; "
                         "the pipeline's messages are host bytes, which it sends over Gloo: pass "
                         "a Gloo group (torch.distributed.new_group(ranks, backend='gloo'))")
