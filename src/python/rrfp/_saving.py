"""Pipeline.save and Pipeline.load across the processes of a job: every process writes its
part under one token, rank 0 commits the save with the manifest, and a failure anywhere is
told to every process (checkpoint.py holds the files' format)."""
from . import checkpoint
from ._launch import agreed

# How save() tells the other processes that rank 0 could not write the manifest.
_NO_MANIFEST = "save: process 0 could not write the manifest of"
_SEED_STEP = "rrfp_seed_step"  # in a checkpoint's extras: the steps run, for seed=
_SCALER = "rrfp_grad_scaler"  # and the GradScaler's state, for a pipeline that has one


def save(pipe, path, optimizer, extra):
    """Pipeline.save."""
    checkpoint.refuse_not_optimizer("save", optimizer)
    pipe._refresh_ties()  # a tie's replaced copy is named as the tie
    token = _save_token(pipe)
    writes = pipe.replica == 0

    def write():
        if writes:
            kept = {_SEED_STEP: pipe._data.seed_step}
            if pipe._data.scaler is not None:
                kept[_SCALER] = pipe._data.scaler.state_dict()
            checkpoint.write_part(path, pipe.rank, pipe.chunks, optimizer,
                                  dict(extra, **kept), pipe._canonical(), token)

    where = str(path).replace("{", "{{").replace("}", "}}")
    try:
        # Every part is in place once this returns (its gather follows every write).
        agreed(pipe._core, write, f"save: process(es) {{bad}} could not write their part "
               f"of '{where}'; its previous checkpoint is kept")
    except BaseException:
        if writes:
            checkpoint.discard_part(path, pipe.rank, token)
        raise
    unwritten = []  # rank 0: its manifest write failed, the previous one stands

    def commit():
        if pipe.rank == 0:
            try:
                checkpoint.write_manifest(path, token, pipe._core.world // pipe._dp)
            except BaseException:
                unwritten.append(True)
                raise
    try:  # the commit, told to every process: none returns before the manifest is there
        agreed(pipe._core, commit, _NO_MANIFEST + f" '{where}'; its previous checkpoint is "
               "kept")
    except BaseException as e:
        # Known unwritten (rank 0's own failure, told to the others): this save's parts go.
        # A process lost in the gather may be lost after rank 0 wrote it: they stay, as the
        # manifest may name them (the next save removes them if it does not).
        if writes and (unwritten or str(e).startswith(_NO_MANIFEST)):
            checkpoint.discard_part(path, pipe.rank, token)
        raise
    if pipe.rank == 0:  # what the manifest does not name: a load reads none of it
        checkpoint.remove_other_parts(path, token)


def _save_token(pipe):
    """One token for the save on every process: rank 0's."""
    token = checkpoint.new_token() if pipe.rank == 0 else 0
    if pipe._core.world > 1:
        token = int(pipe._core.all_gather([float(token)])[0][0])
    return token


def load(pipe, path, optimizer):
    """Pipeline.load."""
    checkpoint.refuse_not_optimizer("load", optimizer)
    pipe._refresh_ties()
    extra = agreed(pipe._core, lambda: _load_here(pipe, path, optimizer),
                   "load: process(es) {bad} could not load the checkpoint; their own errors "
                   "say why")
    if pipe._ties is not None:  # each copy loaded its own entry: the first's values win
        pipe._ties.copy_first()
    return extra


def _load_here(pipe, path, optimizer):
    model, optim, extra = checkpoint.load_parts(path)
    extra = dict(extra or {})
    if _SEED_STEP in extra:  # a seeded pipeline goes on drawing as it would have
        pipe._data.seed_step = extra.pop(_SEED_STEP)
    scaler_state = extra.pop(_SCALER, None)  # a pipeline without a scaler ignores it
    if scaler_state and pipe._data.scaler is not None and pipe._data.scaler.is_enabled():
        pipe._data.scaler.load_state_dict(scaler_state)
    pipe.load_state_dict(model)
    if optimizer is not None:
        if optim is None:
            raise KeyError(f"checkpoint '{path}': it holds no optimizer state")
        checkpoint.load_optimizer_state(pipe.chunks, optimizer, optim, pipe._canonical())
    return extra
