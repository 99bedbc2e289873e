"""How a pipeline's processes were started and what every process must agree on: the
launcher's transport, the options compared between processes, the calls they make together
(torch.distributed's groups are _c10d's)."""
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


def env_int(env, name, what, by, least=0, absent=None, most=None):
    """The whole number the environment variable `name` holds (`absent` where it is unset):
    decimal digits, blanks around them ignored, from `least` to `most` (2**31 - 1 where not
    given). Anything else is
    refused, naming the variable and `what` it should be, set `by` whom (ValueError). Every
    launcher's variable is read so: int() alone named the value but not the variable and took
    '+4' or '1_000', and a test of str.isdigit() refused ' 4', which int() took, so a refusal
    behind it was skipped silently."""
    if name not in env:
        return absent
    raw = env[name]
    text = raw.strip()
    # The length first: int() refuses over 4300 digits with a message of its own.
    most = _ENV_INT_MAX if most is None else most
    if text.isascii() and text.isdigit() and len(text) <= len(str(_ENV_INT_MAX)):
        value = int(text)
        if least <= value <= most:
            return value
    shown = raw if len(raw) <= 30 else raw[:30] + "..."
    raise ValueError(f"environment variable {name}: {shown!r} is not {what} (decimal digits, "
                     f"{least} to {most}); it is set by {by}")


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
        # Refused here as WORLD_SIZE is: torch's own int() names the value alone. A rank past
        # the last one failed in Gloo's "enforce fail ... rank < size" on its own process,
        # while the others waited in the group's forming for torch's 30 minutes.
        env_int(env, "RANK", f"a rank below WORLD_SIZE={world}", said, most=world - 1)
        # torch's int() named the value alone ("invalid literal for int() ... 'abc'").
        env_int(env, "MASTER_PORT", "a TCP port", said, least=1, most=65535)
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
