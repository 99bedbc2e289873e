"""The groups a c10d pipeline makes (rrfp._c10d.c10d_groups), against a torch.distributed
whose calls are recorded: the pipeline's messages on groups whose timeout outlasts any pause
between steps (under torch's 30 minutes, Gloo closed every connection of the group when a
receive posted between steps timed out, and every later step failed), the barrier and the
gathers on groups with the pipeline's timeout (one left running after a failed step held the
process's exit for torch's 30 minutes), the gathers where the processes meet at a call on groups
with the arrival's timeout (a process pausing alone between steps longer than the pipeline's
timeout failed the others' next step); a Gloo subgroup of the caller's taken as it is; the
processes of a group the caller made meeting within the arrival's timeout before any of that."""
import datetime

import pytest

dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not built in", allow_module_level=True)

from rrfp import _c10d  # noqa: E402

YEAR = datetime.timedelta(days=365)


# The meetings c10d_groups asked for, (group, arrival) each (test_c10d_meeting.py tests the
# meeting itself).
MEETINGS = []


def recorded(monkeypatch, world, rank, backend="gloo"):
    """A default group of `world` processes of `backend`, this one `rank`: returns it and the
    list new_group appends (ranks, timeout, backend) to, each group made being its index."""
    default, made = object(), []
    MEETINGS.clear()
    monkeypatch.setattr(_c10d, "_meet",
                        lambda d, group, arrival, kind: MEETINGS.append((group, arrival)))
    monkeypatch.setattr(dist.group, "WORLD", default)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_backend", lambda g=None: backend if g is default else "gloo")
    monkeypatch.setattr(dist, "all_gather_object",
                        lambda out, obj, group=None: out.__setitem__(slice(None), [obj] * len(out)))
    monkeypatch.setattr(dist, "get_world_size", lambda g=None: world)
    monkeypatch.setattr(dist, "get_rank", lambda g=None: rank)
    monkeypatch.setattr(dist, "get_process_group_ranks", lambda g: list(range(world)),
                        raising=False)

    def new_group(ranks, timeout=None, backend=None):
        made.append((list(ranks), timeout, backend))
        return len(made) - 1
    monkeypatch.setattr(dist, "new_group", new_group)
    return default, made


def test_one_replica_messages_within_the_arrival_and_collectives_take_the_timeout(monkeypatch):
    # The messages' groups are made within the arrival's limit (a process that ended inside
    # new_group held the others for the year of their timeout); their waits outlast pauses by
    # the transport's own limit (mp_pause.py).
    _, made = recorded(monkeypatch, 2, 1)
    got = _c10d.c10d_groups(None, 2, 1, 7.0, 60.0)
    sixty = datetime.timedelta(seconds=60)
    assert made == [([0, 1], sixty, "gloo"), ([0, 1], datetime.timedelta(seconds=7), "gloo"),
                    ([0, 1], sixty, "gloo")]
    assert got == dict(group=0, collectives=1, arrivals=2)


def test_a_group_a_process_did_not_take_part_in_is_named(monkeypatch):
    # One process ended while the others made the pipeline's groups: new_group failed with
    # Gloo's bare "Socket Timeout", naming neither the call nor the processes.
    recorded(monkeypatch, 2, 0)
    made = []

    def new_group(ranks, timeout=None, backend=None):
        made.append(ranks)
        if len(made) == 2:
            raise RuntimeError("Socket Timeout")
        return len(made) - 1
    monkeypatch.setattr(dist, "new_group", new_group)
    with pytest.raises(RuntimeError, match=r"making the pipeline's Gloo group over ranks "
                       r"\[0, 1\] failed: every process of the job makes it, and one did not "
                       r"\(it ended, or stopped answering\); Socket Timeout"):
        _c10d.c10d_groups(None, 2, 1, 2.0, 5.0)


def test_replicas_each_group_by_its_use(monkeypatch):
    _, made = recorded(monkeypatch, 4, 3)  # replica 1, stage 1
    got = _c10d.c10d_groups(None, 2, 2, 5.0, 9.0)
    five, nine = datetime.timedelta(seconds=5), datetime.timedelta(seconds=9)
    assert made == [([0, 1], nine, "gloo"), ([2, 3], nine, "gloo"),  # the pipelines' messages
                    ([0, 1], five, "gloo"), ([2, 3], five, "gloo"),  # their collectives
                    ([0, 2], five, "gloo"), ([1, 3], five, "gloo"),  # the stages' replicas
                    ([0, 1], nine, "gloo"), ([2, 3], nine, "gloo"),  # the arrivals: pipelines
                    ([0, 2], nine, "gloo"), ([1, 3], nine, "gloo")]  # and replicas
    assert got == dict(group=1, collectives=3, dp_group=5, arrivals=7, arrival_replicas=9)


def test_a_default_group_of_another_backend_is_compared_over_the_messages_group(monkeypatch):
    _, made = recorded(monkeypatch, 2, 0, backend="nccl")
    got = _c10d.c10d_groups(None, 2, 1, 3.0, 3.0)
    three = datetime.timedelta(seconds=3)
    assert made == [([0, 1], three, "gloo")] * 3
    assert got == dict(group=0, collectives=1, arrivals=2)


def test_the_processes_of_a_callers_group_meet_before_any_group_is_made(monkeypatch):
    # A default group the caller made: a process that never built its Pipeline held the others
    # in the layout's gather for the group's timeout (torch's 30 minutes) or in new_group for
    # the messages' groups' year, past arrival_timeout.
    default, made = recorded(monkeypatch, 3, 0)
    assert _c10d.c10d_groups(None, 3, 1, 2.0, 5.0) == dict(group=0, collectives=1, arrivals=2)
    assert MEETINGS == [(default, 5.0)]

    def missing(d, group, arrival, kind):
        raise RuntimeError("process(es) 2 did not come")
    monkeypatch.setattr(_c10d, "_meet", missing)
    made.clear()
    with pytest.raises(RuntimeError, match="did not come"):
        _c10d.c10d_groups(None, 3, 1, 2.0, 5.0)
    assert made == []


def test_a_default_group_of_another_backend_with_replicas_destroys_its_layouts_group(
        monkeypatch):
    # The Gloo group over which the layout is compared is the pipeline's with dp=1 and no
    # one's with dp > 1, where it stayed made for ever.
    _, made = recorded(monkeypatch, 4, 0, backend="nccl")
    destroyed = []
    monkeypatch.setattr(dist, "destroy_process_group", destroyed.append)
    got = _c10d.c10d_groups(None, 2, 2, 3.0, 3.0)
    assert made[0] == ([0, 1, 2, 3], datetime.timedelta(seconds=3), "gloo")
    assert destroyed == [0]
    assert 0 not in got.values()


def test_no_timeout_leaves_the_collectives_torchs_and_a_callers_subgroup_is_taken(monkeypatch):
    _, made = recorded(monkeypatch, 2, 0)
    assert _c10d.c10d_groups(None, 2, 1, 0.0, 0.0) == dict(group=0, collectives=1, arrivals=2)
    assert made[1] == ([0, 1], None, "gloo")
    # No arrival limit: the messages' group and the arrivals' are made within a year.
    assert made[0] == made[2] == ([0, 1], YEAR, "gloo")
    mine = object()  # a Gloo subgroup of the caller's: the processes outside it make no other
    made.clear()
    assert _c10d.c10d_groups(mine, 2, 1, 4.0, 60.0) == dict(group=mine)
    assert made == []


def test_a_callers_subgroup_with_replicas_is_refused_not_a_hang(monkeypatch):
    # new_group takes every process of the job, and the processes outside the caller's subgroup
    # never call it: each replica's group was waited for forever.
    _, made = recorded(monkeypatch, 4, 0)
    monkeypatch.setattr(dist, "get_world_size", lambda g=None: 8 if g is None else 4)
    with pytest.raises(ValueError, match=r"group: with dp=2 the pipeline makes its replicas' "
                                         r"groups, .* this group holds 4 of 8"):
        _c10d.c10d_groups(object(), 2, 2, 5.0, 60.0)
    assert made == []



def test_the_arrivals_wait_is_at_least_the_timeout_and_none_where_either_is_zero():
    from rrfp._args import arrival_after
    assert arrival_after(120.0, 1800.0) == 1800.0
    assert arrival_after(120.0, 10.0) == 120.0  # a call's gather never waits less than a step
    assert arrival_after(120.0, 0) == 0.0
    assert arrival_after(0, 1800.0) == 0.0  # timeout 0 turns every deadline off, as before


def test_a_freed_pipeline_leaves_its_groups(tmp_path):
    # torch's registry held every group a pipeline made for ever: each pipeline built and freed
    # kept its groups' sockets and Gloo's threads, until a script that built one per evaluation
    # ran out of files. The caller's own group stays.
    import gc
    import torch
    import rrfp
    from torch.distributed import distributed_c10d as c10d

    def registry():  # torch's groups: a dict of its module in 1.13, of its _world later
        return c10d._pg_map if hasattr(c10d, "_pg_map") else c10d._world.pg_map

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rendezvous", rank=0,
                            world_size=1)
    try:
        before = len(registry())
        for _ in range(3):
            pipe = rrfp.Pipeline([torch.nn.Linear(4, 4)], lambda o, t: (o - t).square().sum(),
                                 pp=1, microbatches=2, transport="c10d", timeout=30)
            pipe.step(torch.ones(4, 4), torch.zeros(4, 4))
            assert len(registry()) > before  # its own groups, while it lives
            del pipe
            gc.collect()
            assert len(registry()) == before
        mine = dist.new_group([0], backend="gloo")
        pipe = rrfp.Pipeline([torch.nn.Linear(4, 4)], lambda o, t: (o - t).square().sum(),
                             pp=1, microbatches=2, transport="c10d", group=mine, timeout=30)
        pipe.step(torch.ones(4, 4), torch.zeros(4, 4))
        del pipe
        gc.collect()
        assert mine in registry()  # the caller's
    finally:
        dist.destroy_process_group()


def test_out_of_descriptors_making_a_group_says_so(tmp_path):
    # A process out of descriptors making a pipeline's groups was told "one did not (it ended,
    # or stopped answering)", blaming another process.
    import errno
    import os
    import resource
    import torch
    import rrfp

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rendezvous", rank=0,
                            world_size=1)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")), hard))
        with pytest.raises(OSError, match=r"out of file descriptors \(ulimit -n\).*raise the "
                                          r"limit, or free the pipelines no longer used") as e:
            rrfp.Pipeline([torch.nn.Linear(4, 4)], lambda o, t: (o - t).square().sum(), pp=1,
                          microbatches=2, transport="c10d", timeout=30)
        assert e.value.errno == errno.EMFILE
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        dist.destroy_process_group()


def test_pipelines_built_and_freed_keep_no_threads_or_descriptors(tmp_path):
    # Each c10d Pipeline freed kept its transport, its receives posted, and with it its
    # messages' Gloo group: a script building one per evaluation grew by its threads and sockets
    # until it ran out of descriptors. Its transport closes with its peers (none here) and goes,
    # and the group with it.
    import gc
    import os
    import torch
    import rrfp

    def held():
        return len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd"))

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rendezvous", rank=0,
                            world_size=1)
    try:
        seen = []
        for _ in range(12):
            pipe = rrfp.Pipeline([torch.nn.Linear(4, 4)], lambda o, t: (o - t).square().sum(),
                                 pp=1, microbatches=2, transport="c10d", timeout=30)
            pipe.step(torch.ones(4, 4), torch.zeros(4, 4))
            del pipe
            gc.collect()
            seen.append(held())
        assert seen[-1] == seen[1], f"threads and descriptors after each pipeline: {seen}"
    finally:
        dist.destroy_process_group()


def test_global_ranks_are_passed_where_the_callers_group_numbers_processes_otherwise(monkeypatch):
    # A subgroup [2, 3]: its rank 0 is torchrun's rank 2, and messages name both (a stall named
    # "stage 0 (c10d rank 0)", read as torchrun's rank 0, a process of another pipeline).
    monkeypatch.setattr(_c10d, "group_ranks", lambda d, g: {"sub": (2, 3), "all": [0, 1]}[g])
    assert _c10d.global_ranks(None) is None
    assert _c10d.global_ranks("all") is None
    assert _c10d.global_ranks("sub") == [2, 3]
