"""The job's gathers of doubles, each opening with the call that makes it. With a process per
stage, every process makes the pipeline's calls alike; one that skipped a call or made another
pairs its gathers with the wrong ones. Where each gather says its call and the steps made
before it, the processes all find the difference in the same gather and all raise: untold, one
making step() while another made eval_step() got no gradients on stage 0, silently, and one
making save() while the others made step() read their values as its own and went on to wait in
its next gather until the timeout."""
from . import _ended

# The calls a gather can come from, by the code it carries. The GradScaler's unscale_ is
# unscale_() or its step(), which unscales when unscale_() was not called: one call for both.
_CALLS = {1.0: "step()", 2.0: "eval_step()", 3.0: "clip_grad_norm_()", 4.0: "save()",
          5.0: "load()", 6.0: "GradScaler.unscale_()", 7.0: "GradScaler.update()",
          8.0: "Pipeline()", 9.0: "the end of its script"}

# The construction's tag: no step is made before it, and the pipeline has no number yet.
BUILDING = ("Pipeline()", 0, None)

# Pipelines made in this process under mpirun, where every pipeline's gathers go over the one
# communicator of the job: two pipelines whose calls the processes made in different orders had
# one's gathers paired with the other's (rank 0's A.clip_grad_norm_() with rank 1's
# B.clip_grad_norm_(): a norm of both models, which clipped both; a checkpoint of A's stage 0
# and B's stage 1, committed). Elsewhere each pipeline gathers over groups of its own.
_MADE_OVER_MPI = [0]


def pipeline_number(transport):
    """The number its gathers' tags give a pipeline just made over `transport`: under mpirun
    the pipelines this process made before it (every process makes them in the same order, as
    each construction is a gather of the job); 0 elsewhere."""
    if transport != "mpi":
        return 0
    _MADE_OVER_MPI[0] += 1
    return _MADE_OVER_MPI[0] - 1


def call_of(pipe, name):
    """The tag of a gather of `name` made by `pipe` (a Pipeline): with the steps it made and
    its number (pipeline_number)."""
    return (name, pipe._step, pipe._number)


def gather(core, call, values):
    """Every process's `values` (by job rank) from the job's all-gather of doubles, once every
    process is found making the same `call` (a name of _CALLS, the steps made before it, the
    pipeline's number or None while it is made): an
    arrival gather (Job::arrival_gather_bytes), where a process may come up to the pipeline's
    arrival_timeout after the others. Raises RuntimeError on every process alike where the
    calls differ."""
    name, steps, number = call
    code = next(k for k, v in _CALLS.items() if v == name)
    tag = [code, float(steps), -1.0 if number is None else float(number)]
    _ended.gather_entered()
    try:
        every = core.all_gather(tag + list(values), arrival=True)
    except RuntimeError as e:
        gone, calls_differ = _ended.gone()  # over c10d, by the processes' own word
        if not gone:
            raise
        alike = (": every process must make the pipeline's calls alike and in the same order"
                 if calls_differ else "")
        raise RuntimeError(
            f"{name}: {gone} (torch.distributed's ranks) while this process made {name} after "
            f"{steps} steps{alike} ({e})") from e
    if len({tuple(v[:3]) for v in every}) > 1:
        raise RuntimeError(mismatch(name, every))
    return [v[3:] for v in every]


def mismatch(name, every):
    """The words of gather's refusal in `name` (this process's call), from what every process
    sent."""
    calls = [v for v in every if len(v) >= 3 and v[0] in _CALLS and v[0] != 9.0]
    numbered = len({v[2] for v in calls if v[2] >= 0}) > 1  # pipelines apart: say which

    def at(r, v):
        if len(v) < 2 or v[0] not in _CALLS:
            return f"job rank {r} in another collective"
        if v[0] == 9.0:  # under mpirun, a process's end (pipeline_core.cpp: end_of_script)
            return f"job rank {r} at {_CALLS[v[0]]}"
        of = ""
        if numbered and len(v) >= 3:
            of = " of a pipeline being made" if v[2] < 0 else f" of pipeline {int(v[2])}"
        return f"job rank {r} in {_CALLS[v[0]]}{of} after {int(v[1])} steps"
    where = ", ".join(at(r, v) for r, v in enumerate(every))
    pipelines = ("; pipelines are numbered from 0 in the order each process made them, and "
                 "with several alive every process must call them in the same order"
                 if numbered else "")
    return (f"{name}: the processes of the job are not making the same call ({where}; steps "
            f"count step() and eval_step() calls{pipelines}); every "
            "process must make the pipeline's calls (step(), eval_step(), clip_grad_norm_(), "
            "save(), load(), and its GradScaler's unscale_() or step(), and update()) alike and "
            "in the same order (one that skipped or added a call has its collectives paired with "
            "the wrong ones from then on)")
