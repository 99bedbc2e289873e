"""torch.distributed's groups of a pipeline over the c10d transport: the default group made
from torchrun's environment, the Gloo groups the pipeline runs on, and their release."""
import os
import threading

from . import _ended
from ._launch import _compared, _refuse_differences


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
    The barrier, gathers and exchanges run on groups whose timeout is `timeout` (the pipeline
    passes its own and 5 s, the time a stalled process takes to say what stalled): a collective
    left running after a failed step held the process's exit for torch's 30 minutes. The
    gathers where the processes meet at a call (_calls.gather), after what each did alone
    between calls, run on groups whose timeout is `arrival`: one pausing alone between steps
    for longer than `timeout` failed the others' next step, and Gloo closed the groups. The
    pipeline's messages run on groups made within `arrival`, whose sends and receives wait
    with a limit of the transport's that outlasts any pause between steps (_messages_group):
    their receives stay posted between steps. A Gloo subgroup of the
    caller's is used for all as it is: the processes outside it would make no other."""
    import torch.distributed as dist
    _ended.c10d_pipeline_built()
    group = _met_group(dist, group, arrival)
    if dist.get_backend(group) == "gloo":
        _agree_layout(dist, group, pp, dp)
        host = None
    else:
        # The default group of NCCL, say, carries CUDA tensors alone: compared over the Gloo
        # group of its ranks that dp=1 keeps as its own (every process makes it first, whatever
        # its pp and dp; with dp > 1 it is destroyed: no pipeline's, nothing released it).
        host = _messages_group(dist, group_ranks(dist, group), arrival)
        _agree_layout(dist, host, pp, dp)
        if dp > 1:
            dist.destroy_process_group(host)
    if dp == 1:
        if group is not dist.group.WORLD:  # a Gloo subgroup (the docs ask for one of its own)
            return dict(group=group)
        # The default group gets groups of the pipeline's own over its ranks: the pipeline's
        # receives, posted between steps, took the caller's own point-to-point messages of the
        # default group (a dist.recv then waited for ever), and NCCL carries no host memory.
        ranks = group_ranks(dist, group)
        pipe = host if host is not None else _messages_group(dist, ranks, arrival)
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
    made = ([_messages_group(dist, g, arrival) for g in pipes],
            [_bounded(dist, g, timeout) for g in pipes],
            [_bounded(dist, g, timeout) for g in stages],
            [_arrivals(dist, g, arrival) for g in pipes],
            [_arrivals(dist, g, arrival) for g in stages])
    return dict(group=made[0][me // pp], collectives=made[1][me // pp],
                dp_group=made[2][me % pp], arrivals=made[3][me // pp],
                arrival_replicas=made[4][me % pp])


def _met_group(dist, group, arrival):
    """The caller's `group` (None: the default group, made here from torchrun's environment
    if it is not yet), once every process of it has come to build its Pipeline within
    `arrival` seconds (0: no limit)."""
    if group is None:
        if not dist.is_initialized():
            _init_default_group(dist, arrival)  # bounded by `arrival` itself: all have come
            return dist.group.WORLD
        group = dist.group.WORLD
    _refuse_subgroup_of_another_backend(dist, group)  # the subgroups below are Gloo's anyway
    _meet(dist, group, arrival, "world" if group is dist.group.WORLD else "own")
    return group


# How many meetings this process has made, by its group and its rank in the job (one rank a
# process; tests run several as threads): a meeting's keys in the store are its group's and
# its number's, and each process's n-th construction over a group meets the others' n-th,
# whatever became of it.
_MET = {}

# torch's own timeout of a group and its store: the wait an arrival_timeout (or timeout) of 0
# leaves to the joining and the meeting, which every process makes whatever its limit.
_TORCH_DEFAULT_S = 1800.0
# Past arrival_timeout, how long the probe of the store may take still (its client's connect
# gives up at the limit by itself).
_PROBE_GRACE_S = 1.0


def _meet(dist, group, arrival, kind="1"):
    """Returns once every process of `group`, a group the caller made, has come here, and
    raises RuntimeError on every process alike, naming those that did not come, once one of
    them has waited `arrival` seconds (0: torch's 30 minutes). Every process meets, whatever
    its limit: one that skipped the meeting for a limit of 0 left the others waiting in it
    until theirs, and then named it as not come. What follows waits for every process
    in torch's own terms: the layout's gather over the group, with the group's timeout (30
    minutes unless the caller set another), and new_group, whose waits take the new group's
    (a year for the messages' groups then), so that a process that never built its Pipeline
    held the others that long, and arrival_timeout did not apply.

    The store is polled, never waited on: a wait that timed out stayed registered with torch
    1.13's store, whose reply to it, once the key came, answered the next request on the
    shared connection. The outcome is one key, set once (compare_set): the first process to
    see every process come writes "met", the first to reach its deadline first the ranks
    missing, and every process does what it reads, so none passes where another gave up.

    Each process says what `kind` of group it passed ("world": the default group, "own": one
    of its own); met, processes of another kind than others are refused on every one alike
    (ValueError): one passing group= over the same ranks as the other's default group met it,
    and then each waited for the other in a gather over another group, for torch's 30
    minutes."""
    if arrival <= 0:
        arrival = _TORCH_DEFAULT_S
    import hashlib
    import time
    ranks, me = group_ranks(dist, group), dist.get_rank()
    store = dist.distributed_c10d._get_default_store()
    place = hashlib.sha256(repr(ranks).encode()).hexdigest()[:16]
    n = _MET.get((place, me), 0)
    _MET[(place, me)] = n + 1
    prefix = f"rrfp/meet/{place}/{n}/"
    store.set(prefix + str(me), kind)  # who came, read by the process that gives up
    store.add(prefix + "count", 1)
    deadline, pause = time.monotonic() + arrival, 1e-3
    while True:
        if store.add(prefix + "count", 0) >= len(ranks):
            outcome = store.compare_set(prefix + "outcome", "", "met")
            break
        # compare_set of a key absent returns the value expected, and sets nothing.
        outcome = store.compare_set(prefix + "outcome", "?", "?")
        if outcome != b"?":
            break
        if time.monotonic() >= deadline:
            missing = [r for r in ranks if store.compare_set(prefix + str(r), "?", "?") == b"?"]
            if missing:  # else all came, a count still to add: the next poll sees it
                outcome = store.compare_set(prefix + "outcome", "", ",".join(map(str, missing)))
                break
        time.sleep(pause)
        pause = min(2 * pause, 0.01)  # torch's own barrier polls its store every 10 ms
    if outcome != b"met":
        _refuse_meeting(outcome.decode(), me, len(ranks), arrival)
    kinds = {r: store.get(prefix + str(r)).decode() for r in ranks}  # each set before it came
    if len(set(kinds.values())) > 1:
        own = [r for r, k in kinds.items() if k == "own"]
        world = [r for r, k in kinds.items() if k != "own"]
        raise ValueError(f"group: process(es) {own} passed a group of their own and "
                         f"process(es) {world} the default group (group=None): every process "
                         "of the pipeline passes the same group")


def _refuse_meeting(missing, me, size, arrival):
    said = missing.replace(",", ", ")
    if str(me) in missing.split(","):
        raise RuntimeError(
            f"transport c10d: this process (rank {me}) came to build its Pipeline after "
            f"another of the group's {size} had waited its arrival_timeout (or timeout where "
            f"longer) for process(es) {said}: each must build it within the others' "
            f"arrival_timeout, in the same order")
    raise RuntimeError(
        f"transport c10d: process(es) {said} of the {size} of the group did not come to build "
        f"their Pipeline within the arrival_timeout (or timeout where longer) of a process "
        f"that waited ({arrival:g} s here): each must build it, in the same order")


def release_groups_with(owner, core, groups, given, building):
    """Leaves the groups c10d_groups made (`groups`, but the caller's own `given` one) to be
    destroyed when `owner`, the Pipeline, goes, once `core` (its PipelineCore, None where it
    could not be built: then at once) has closed its runtime, whose receives stay posted on
    them: torch's registry held every group for ever, and each pipeline built and freed kept
    its groups' sockets and Gloo's threads (6 descriptors and 9 threads at 2 processes), until
    a script building one per evaluation ran out of files. `building`: [True] until the owner
    is built, so that one freed before is told to the others as a building that failed, and
    where `core` is None, as one this process refused on its own."""
    import weakref
    made = list({id(g): g for g in groups.values() if g is not None and g is not given}.values())
    if not made:
        return
    if core is None:
        _destroy_groups(made, os.getpid(), None, building)
        return
    weakref.finalize(owner, _destroy_groups, made, os.getpid(), core, building).atexit = False


def _destroy_groups(made, pid, core, building):
    try:
        import torch.distributed as dist
    except Exception:  # a pipeline freed as the interpreter ends, its imports gone: nothing to do
        return
    # A forked process's copies are its parent's: left as they are.
    if pid != os.getpid() or not (dist.is_available() and dist.is_initialized()):
        return
    if core is not None:
        core.close()
    # None: its own building refused it; else building: it failed there, after that core.
    _ended.note_freed(_ended.REFUSED if core is None else
                      _ended.FAILED if building[0] else _ended.BUILT)
    for g in made:
        try:
            dist.destroy_process_group(g)
        except RuntimeError as e:  # destroyed already (destroy_process_group() of all, say)
            if "invalid process group" not in str(e).lower():
                raise
    # The transports closed here, and before, whose peers have closed theirs go with their hold
    # on the messages' group; the others when the next pipeline is made or freed.
    from . import _rrfp
    _rrfp._c10d_release_closed()


# A year: longer than any pause between two steps of a job (an evaluation, a checkpoint's
# upload), shorter than what Gloo's deadlines (steady clock plus timeout, in nanoseconds) hold.
_MESSAGES_TIMEOUT_DAYS = 365


def _messages_group(dist, ranks, arrival):
    """A Gloo group over `ranks` for the pipeline's messages, made within `arrival` seconds (0:
    a year). Its receives stay posted between steps, and Gloo fails a wait at its group's
    timeout and closes every connection of the group: a pause between steps longer than that
    failed every later step ("Application timeout caused pair closure"). The transport waits
    for each message with a year's limit of its own, so the group's timeout bounds its making
    (with a year, a process that ended inside new_group held the others that long) and the
    collectives that run on it: the layout's comparison, and the arrivals' gathers where
    `arrival` is 0 (no limit). A step that stops making progress is the pipeline's `timeout`
    to catch, not this group's."""
    if arrival > 0:
        return _bounded(dist, ranks, arrival)
    import datetime
    return _new_group(dist, ranks, datetime.timedelta(days=_MESSAGES_TIMEOUT_DAYS))


def _bounded(dist, ranks, timeout):
    """A Gloo group over `ranks` whose operations end within `timeout` seconds (0: torch's
    own timeout; made all the same, so that every process makes the same groups whatever its
    `timeout`, which the processes need not agree on)."""
    if timeout <= 0:
        return _new_group(dist, ranks, None)
    import datetime
    # At least a millisecond, as the core rounds the pipeline's up to (torch would take 0).
    return _new_group(dist, ranks, datetime.timedelta(seconds=max(timeout, 1e-3)))


def _new_group(dist, ranks, timeout):
    """new_group over `ranks` with Gloo, its waits `timeout` (None: torch's own). Making it
    takes every process of the job; one that ended on the way failed it with Gloo's bare
    "Socket Timeout", naming neither the call nor the processes: said here."""
    kw = {} if timeout is None else {"timeout": timeout}
    try:
        return dist.new_group(ranks, backend="gloo", **kw)
    except RuntimeError as e:
        if "Too many open files" in str(e):  # blamed on another process, as if it had ended
            import errno
            raise OSError(
                errno.EMFILE,
                f"transport c10d: making the pipeline's Gloo group over ranks {ranks} failed: "
                "this process is out of file descriptors (ulimit -n); each Pipeline on the "
                "c10d transport holds a socket per peer in each of its groups while it lives "
                "(a freed one until every process has freed it): raise the limit, or free the "
                "pipelines no longer used") from e
        raise RuntimeError(
            f"transport c10d: making the pipeline's Gloo group over ranks {ranks} failed: every "
            "process of the job makes it, and one did not (it ended, or stopped answering); "
            f"{e}") from e


def _arrivals(dist, ranks, arrival):
    """A Gloo group over `ranks` for the gathers where the processes meet at a call, whose
    operations end within `arrival` seconds (0: no limit): made as the messages' groups are,
    a group of its own all the same (the messages' receives stay posted between calls)."""
    return _messages_group(dist, ranks, arrival)


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


class _NoStore(RuntimeError):
    """_probe_store's: what listens at the store's address does not answer as one."""


def _probe_store(dist, limit, at):
    """Where this process joins another's store (every rank but 0, or every one under
    torchrun's agent), that what listens at MASTER_ADDR:MASTER_PORT answers as a store within
    `limit` seconds: torch's rendezvous awaits that answer with no limit of its own, holding the
    GIL (a process joining a port held by another program, or a stopped host's store, stayed
    there until killed). A client of its own asks, which joins no count; on a daemon thread,
    left behind where nothing answers."""
    import datetime
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    if int(os.environ["RANK"]) == 0 and not agent:
        return  # it hosts the store: a port taken is refused at once
    answer = []

    def ask():
        try:
            store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                                  is_master=False, timeout=datetime.timedelta(seconds=limit),
                                  wait_for_workers=False)
            store.add("rrfp/probe", 0)
            answer.append(None)
        except Exception as e:  # raised again on the caller's thread
            answer.append(e)
    thread = threading.Thread(target=ask, name="rrfp-store-probe", daemon=True)
    thread.start()
    thread.join(limit + _PROBE_GRACE_S)
    if not answer:
        raise _NoStore(f"the process group could not form at {at} (MASTER_ADDR:MASTER_PORT): "
                       f"nothing there answered as a store within {limit:g} s: the port is "
                       f"another program's, or the store's host is stopped")
    if answer[0] is not None:
        raise answer[0]


def _init_default_group(dist, timeout):
    """The default group from torchrun's environment (RANK, WORLD_SIZE, ...), every process
    joining within the pipeline's arrival_timeout (`timeout` here; 0: torch's own 30 minutes).
    Only the joining is bounded so: the group stays the caller's, with torch's timeout (the
    pipeline runs on groups of its own, c10d_groups). Every process joins so, whatever its
    limit: one that joined by init_process_group alone for a limit of 0 stayed in it after the
    others had given up on it."""
    # Started without torchrun: said as the MPI transport says it outside mpirun (torch's
    # "environment variable RANK expected" came as a RuntimeError naming the store at "?:?").
    unset = [v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
             if v not in os.environ]
    if unset:
        raise ValueError(f"`transport` c10d: start the script under torchrun, or call "
                         f"torch.distributed.init_process_group first ({', '.join(unset)} not "
                         f"set; see docs/python.md)")
    limit = timeout if timeout > 0 else _TORCH_DEFAULT_S
    # The wait is the longer of the two (arrival_after): named as such.
    whose = ("arrival_timeout, or timeout where longer" if timeout > 0
             else "arrival_timeout 0: torch's own")
    import datetime
    import time
    world = os.environ.get("WORLD_SIZE", "?")
    # The store's address, in every message: "Connection reset by peer" named no port.
    at = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
    # From before the rendezvous: on the process that hosts the store, torch's waits out its
    # timeout for the others and returns all the same, and the join counted a second one.
    deadline = time.monotonic() + limit
    try:
        _probe_store(dist, limit, at)
        store, rank, size = next(dist.rendezvous(
            "env://", timeout=datetime.timedelta(seconds=limit)))
        store.set_timeout(datetime.timedelta(seconds=limit))
        store.add(f"rrfp/joined/{rank}", 1)  # who, for the message below (an add of 0 reads)
        store.add("rrfp/joined", 1)
        while store.add("rrfp/joined", 0) < size:
            if time.monotonic() > deadline:
                missing = [r for r in range(size) if store.add(f"rrfp/joined/{r}", 0) == 0]
                raise TimeoutError(f"rank(s) {missing} did not join the store")
            time.sleep(0.005)
    except _NoStore as e:
        raise RuntimeError(f"transport c10d: {e}") from None
    except (RuntimeError, TimeoutError, ValueError) as e:
        said = str(e)
        if isinstance(e, TimeoutError) or "timeout" in said.lower() or "timed out" in said:
            raise RuntimeError(
                f"transport c10d: the {world} processes of the job did not all join the store "
                f"at {at} (MASTER_ADDR:MASTER_PORT) within {limit:g} s ({whose}): "
                f"each must build its Pipeline; {said}") from e
        raise RuntimeError(f"transport c10d: the process group could not form at {at} "
                           f"(MASTER_ADDR:MASTER_PORT): {said}") from e
    store.set_timeout(datetime.timedelta(seconds=_TORCH_DEFAULT_S))  # torch's, for what follows
    dist.init_process_group("gloo", store=store, rank=rank, world_size=size)


def global_ranks(group):
    """The default group's rank of each of the pipeline's ranks where `group`, the caller's,
    numbers them otherwise (a subgroup: its rank 0 may be torchrun's rank 2), for messages to
    name both; None where they are the same."""
    if group is None:
        return None
    import torch.distributed as dist
    ranks = list(group_ranks(dist, group))
    return None if ranks == list(range(len(ranks))) else ranks


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
