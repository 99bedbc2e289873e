"""The train()/eval() modes of a job's copies of the model, compared before each step.

Each process runs its own chunks in the modes its own modules are in. A process that alone
called model.eval() (rank 0 evaluating, then forgetting model.train()) trained its stages
without dropout and with frozen batch-norm statistics while the others trained theirs with
both, silently. Refused on every process:
- the replicas of a stage (dp > 1) running their chunk in different modes;
- with a list of chunks (every process holds the whole model), copies of a chunk in other
  modes than the process that runs it holds it in, where the chunks' runners differ among
  themselves too (one all in training, another not). Each process switching only the chunks
  it runs (pipe.chunks) to eval(), as docs/python.md shows, leaves the copies it does not run
  behind, but every runner alike: it passes. So does a model frozen in part (a backbone in
  eval(), its head in train()) alike on every process."""
import zlib

# A chunk this process does not hold (chunk_fn builds only its own).
_NOT_HELD = (-1.0, -1.0, -1.0, 0.0)


def mode_values(pipe):
    """Per chunk of the model, in index order, four numbers for the job's gather: a CRC-32 of
    its modules' training flags, how many of them are in training, how many there are, and
    whether this process runs the chunk; _NOT_HELD for a chunk this process does not hold.
    Empty in a job of one process, which has no other copy."""
    if pipe._core.world < 2:
        return []
    held = pipe._data.model if pipe._data.model is not None else pipe.chunks
    values = []
    for c in range(pipe._core.chunks):
        module = held.get(c)
        if module is None:
            values += _NOT_HELD
            continue
        flags = bytes(m.training for m in module.modules())
        values += (float(zlib.crc32(flags)), float(sum(flags)), float(len(flags)),
                   1.0 if c in pipe.chunks else 0.0)
    return values


def refuse_other_modes(call, every):
    """`every`: each process's mode_values. Raises ValueError naming the first chunk whose
    copies differ as the module's docstring says, with each rank's count."""
    if not every or not every[0]:
        return
    chunks = [[(r, tuple(v[4 * c:4 * c + 4])) for r, v in enumerate(every)
               if tuple(v[4 * c:4 * c + 4]) != _NOT_HELD] for c in range(len(every[0]) // 4)]
    runners = [[(r, v) for r, v in held if v[3]] for held in chunks]
    # The runners' state of each chunk: all in training, none, or some.
    states = {_state(v) for run in runners for _, v in run}
    for c, (held, run) in enumerate(zip(chunks, runners)):
        if len({v[0] for _, v in run}) > 1:  # replicas apart: no intent makes that right
            _refuse(call, c, run[0], [r for r, v in run if v[0] != run[0][1][0]], run)
        if len(states) > 1 and run and any(v[0] != run[0][1][0] for _, v in held):
            _refuse(call, c, run[0], [r for r, v in held if v[0] != run[0][1][0]], held)


def _state(v):
    return "train" if v[1] == v[2] else "eval" if v[1] == 0 else "some"


def _refuse(call, c, first, other, held):
    theirs = dict(held)[other[0]]
    raise ValueError(
        f"{call[:-2]}: the processes hold chunk {c} in different train()/eval() modes (job "
        f"rank {first[0]}, which runs it, with {_training(first[1])}, job rank(s) {other} with "
        f"{_training(theirs)}); each process runs its chunks in its own modules' modes, so "
        "dropout and batch norm would differ between the stages silently: call model.train() "
        "or model.eval() alike on every process; no process ran the step")


def _training(v):
    return f"{int(v[1])} of its {int(v[2])} modules in training"
