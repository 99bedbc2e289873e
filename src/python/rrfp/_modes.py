"""The train()/eval() modes of a job's copies of the model, compared before each step.

Each process runs its own chunks in the modes its own modules are in. A process that alone
called model.eval() (rank 0 evaluating, then forgetting model.train()) trained its stages
without dropout and with frozen batch-norm statistics while the others trained theirs with
both, silently. Where two processes hold the same chunk (every process with a list of chunks;
the replicas of a stage with chunk_fn), their modules' modes must be the same: a chunk held
in one mode by one process and in another by the next is refused on every process. A model
frozen in part on purpose (a backbone in eval(), its head in train()) is the same on every
process and passes."""
import zlib

# A chunk this process does not hold (chunk_fn builds only its own).
_NOT_HELD = (-1.0, -1.0, -1.0)


def mode_values(pipe):
    """Per chunk of the model, in index order, three numbers for the job's gather: a CRC-32 of
    its modules' training flags, how many of them are in training and how many there are;
    _NOT_HELD for a chunk
    this process does not hold. Empty in a job of one process, which has no other copy."""
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
        values += (float(zlib.crc32(flags)), float(sum(flags)), float(len(flags)))
    return values


def refuse_other_modes(call, every):
    """`every`: each process's mode_values. Raises ValueError naming the first chunk whose
    copies differ, with each rank's count, where any do."""
    if not every or not every[0]:
        return
    for c in range(len(every[0]) // 3):
        held = [(r, tuple(v[3 * c:3 * c + 3])) for r, v in enumerate(every)
                if tuple(v[3 * c:3 * c + 3]) != _NOT_HELD]
        if len({v[0] for _, v in held}) < 2:
            continue
        (first, mine), other = held[0], [r for r, v in held if v[0] != held[0][1][0]]
        theirs = dict(held)[other[0]]
        raise ValueError(
            f"{call[:-2]}: the processes hold chunk {c} in different train()/eval() modes (job "
            f"rank {first} with {_training(mine)}, job rank(s) {other} with "
            f"{_training(theirs)}); each process runs its chunks in its own modules' modes, so "
            "dropout and batch norm would differ between the stages silently: call "
            "model.train() or model.eval() alike on every process; no process ran the step")


def _training(v):
    return f"{int(v[1])} of its {int(v[2])} modules in training"
