"""Pipeline.save and Pipeline.load across the processes of a job: every process writes its
part under one token, rank 0 commits the save with the manifest, and a failure anywhere is
told to every process (checkpoint.py holds the files' format). A load reads and checks
everything on every process first, and changes nothing anywhere unless every process can load
its part."""
import os
import time
import warnings

from . import _extras, checkpoint, scaler
from ._args import is_whole
from ._calls import call_of, gather
from ._launch import agreed, agreed_rows
from ._ties import one_value_per_tie

# How save() tells the other processes that rank 0 could not write the manifest.
_NO_MANIFEST = "save: process 0 could not write the manifest of"
_RESERVED = "rrfp_"  # the extras' keys the checkpoint keeps for itself:
_SEED_STEP = "rrfp_seed_step"  # the steps run, for seed=
_SEED = "rrfp_seed"  # the seed itself: a load by a pipeline of another seed says so
_SCALER = "rrfp_grad_scaler"  # and the GradScaler's state, for a pipeline that has one
# A pipeline's attribute: the GradScaler state its last load() read while it had no scaler,
# for the scaler made after it (GradScaler._attach) and for its saves until then.
_LOADED_SCALER = "_rrfp_loaded_scaler_state"
# How long rank 0 looks again for a part it does not see before it calls the folder unshared
# (a network file system may show another machine's new file a moment late).
_PART_WAIT_S = 1.0


def _check_path(what, path):
    """The folder argument of save() and load(): a str or os.PathLike naming something."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{what}: path must be a folder's path (str or os.PathLike), got "
                        f"{type(path).__name__}")
    if not os.fspath(path):
        raise ValueError(f"{what}: path is empty; name the checkpoint's folder")


def _check_save(path, optimizer, extra):
    _check_path("save", path)
    checkpoint.refuse_not_optimizer("save", optimizer)
    reserved = sorted(k for k in extra if k.startswith(_RESERVED))
    if reserved:  # the checkpoint's own entry took the user's place, silently
        raise ValueError(f"save: {', '.join(reserved)}: extra keys beginning with "
                         f"'{_RESERVED}' are the checkpoint's own; name yours otherwise")


def save(pipe, path, optimizer, extra):
    """Pipeline.save."""
    mine = []

    def check():  # an extra that cannot be serialized is refused with the arguments
        _check_save(path, optimizer, extra)
        mine.append(_extras.serialized(extra))
    token = _save_token(pipe, check, optimizer)
    extras = {_extras.EXTRAS: _extras.stage_extras(pipe, mine[0]),
              _extras.LAYOUT: _extras.layout(pipe)}
    pipe._refresh_ties()  # a tie's replaced copy is named as the tie
    writes = pipe.replica == 0

    def write():
        if writes:
            kept = {_SEED_STEP: pipe._data.seed_step}
            if pipe._data.seeding is not None:
                kept[_SEED] = pipe._data.seeding.seed
            if pipe._data.scaler is not None:
                kept[_SCALER] = pipe._data.scaler.state_dict()
            elif loaded_scaler_state(pipe) is not None:  # kept for a scaler not made yet
                kept[_SCALER] = loaded_scaler_state(pipe)
            checkpoint.write_part(path, pipe.rank, pipe.chunks, optimizer,
                                  dict(extra, **kept), pipe._canonical(), token, extras,
                                  checkpoint.elsewhere(pipe._data.model, pipe.chunks))

    where = str(path).replace("{", "{{").replace("}", "}}")
    try:
        # Every part is in place once this returns (its gather follows every write).
        agreed(pipe._core, write, f"save: process(es) {{bad}} could not write their part "
               f"of '{where}'; its previous checkpoint is kept", call_of(pipe, "save()"))
        _refuse_unshared(pipe, path, token)
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
               "kept", call_of(pipe, "save()"))
    except BaseException as e:
        # Known unwritten (rank 0's own failure, told to the others): this save's parts go.
        # A process lost in the gather may be lost after rank 0 wrote it: they stay, as the
        # manifest may name them (the next save removes them if it does not).
        if writes and (unwritten or str(e).startswith(_NO_MANIFEST)):
            checkpoint.discard_part(path, pipe.rank, token)
        raise
    if pipe.rank == 0:  # what the manifest does not name: a load reads none of it
        checkpoint.remove_other_parts(path, token)


def _save_token(pipe, check, optimizer):
    """One token for the save on every process (rank 0's), once every process has checked
    its arguments (check()): one refused on any process is refused on every one, in the same
    gather, where the others went on to wait in the next."""
    def mine():
        check()
        return checkpoint.new_token() if pipe.rank == 0 else 0
    trains = any(p.requires_grad for c in pipe.chunks.values() for p in c.parameters())
    _, rows = agreed_rows(pipe._core, mine, "save: process(es) {bad} refused their "
                          "arguments; their own errors say why",
                          lambda token: [token, optimizer is not None, trains],
                          call_of(pipe, "save()"))
    _refuse_optimizer_on_some(rows[:pipe.pp])  # replica 0's processes write the parts
    return int(rows[0][0])  # 48 bits: exact as a float


def _refuse_optimizer_on_some(rows):
    """Refuses, on every process alike, a save whose optimizer is given on some processes and
    not on others whose chunks hold trainable parameters (`rows`: [token, given, trains] of
    replica 0's processes, by job rank): the checkpoint held some stages' optimizer state and
    not the others', and said nothing until a load with the optimizer refused it. A process of
    frozen or parameterless chunks has no optimizer to give."""
    given = [r for r, row in enumerate(rows) if row[1]]
    lack = [r for r, row in enumerate(rows) if not row[1] and row[2]]
    if given and lack:
        raise ValueError(
            f"save: the optimizer was given on process(es) {checkpoint.some_of(given)} and not "
            f"on process(es) {checkpoint.some_of(lack)}, whose chunks hold trainable "
            "parameters: the checkpoint would hold the optimizer's state of some stages "
            "alone, which no load with an optimizer accepts; pass it on every process or on "
            "none; nothing was saved")


def _refuse_unshared(pipe, path, token):
    """Raises on every process unless rank 0 sees every part where it writes the manifest, and
    every other replica's processes see them too under their own `path` (only replica 0
    writes). A `path` on each machine's own disk committed a manifest naming parts that no one
    folder held, and removed each process's part of the previous checkpoint: neither loaded;
    a folder of each replica's own committed a checkpoint that another replica could not
    load."""
    parts = pipe._core.world // pipe._dp
    missing = []
    if pipe.rank == 0 or pipe.replica > 0:
        deadline = time.monotonic() + _PART_WAIT_S
        missing = checkpoint.missing_parts(path, token, parts)
        while missing and time.monotonic() < deadline:
            time.sleep(0.1)
            missing = checkpoint.missing_parts(path, token, parts)
    if pipe._core.world > 1:  # rank 0's list, and which other replicas' processes miss parts
        every = gather(pipe._core, call_of(pipe, "save()"),
                       [float(len(missing))] + [float(r) for r in missing])
        missing = [int(r) for r in every[0][1:]]
        blind = [r for r in range(parts, len(every)) if every[r][0] > 0]
    else:
        blind = []
    if missing:
        names = checkpoint.some_of(checkpoint.part_name(r, token) for r in missing)
        # Rank 0's folder by its own name: another process's `path` may be another string (it
        # named its own, where process 0 had not looked).
        where = f"'{path}'" if pipe.rank == 0 else f"its path (here '{path}')"
        raise FileNotFoundError(
            f"save: process 0 does not see {names} ({len(missing)} of the {parts} parts) in "
            f"{where}, where their processes wrote them: the processes see different folders "
            "(a disk of each machine?); path must be one folder that every process shares (a "
            "shared file system). Nothing was committed; its previous checkpoint is kept")
    if blind:
        where = f"'{path}'" if pipe.rank in blind else "their path"
        raise FileNotFoundError(
            f"save: process(es) {blind} (replicas other than 0, which write no part) do not "
            f"see the parts replica 0 wrote in {where}: the processes see different folders (a "
            "disk of each machine, or a folder of each replica?); path must be one folder that "
            "every process shares (a shared file system), from which each can load. Nothing "
            "was committed; its previous checkpoint is kept")


def load(pipe, path, optimizer):
    """Pipeline.load: nothing changes on any process until every process has read and checked
    what it loads (a failure on one process, or a bad chunk after good ones, left loaded
    what came before it)."""
    pipe._refresh_ties()
    plan, rows = agreed_rows(
        pipe._core, lambda: _prepare(pipe, path, optimizer),
        "load: process(es) {bad} could not load the checkpoint; their own errors say why; "
        "nothing was loaded on any process",
        lambda plan: [plan["token"], float(optimizer is not None)], call_of(pipe, "load()"))
    _refuse_other_saves(path, [r[0] for r in rows])
    _refuse_replicas_apart(pipe, [r[1] for r in rows])
    previous = _apply_optimizer(pipe, optimizer, plan["optimizer"])
    refused_here = []

    def apply_rest():
        try:
            _apply_rest(pipe, plan)
        except BaseException:
            refused_here.append(True)
            raise
    try:
        agreed(pipe._core, apply_rest,
               "load: process(es) {bad} failed to apply a checkpoint they had checked; their "
               "own errors say why; load it again", call_of(pipe, "load()"))
    except BaseException:
        # Where this process's own chunks refused (apply_model_state put them back), its
        # optimizer goes back too; a process whose chunks loaded keeps both new.
        if refused_here and previous is not None:
            optimizer.state, optimizer.param_groups = previous
        raise
    if pipe._ties is not None:  # each copy loaded its own entry: the first's values win
        pipe._ties.copy_first()
    return plan["extra"]


def _prepare(pipe, path, optimizer):
    """What this process loads, read and checked, with nothing changed yet."""
    _check_path("load", path)
    checkpoint.refuse_not_optimizer("load", optimizer)
    model, optim, extra, (saved, layouts, token) = checkpoint.load_parts(
        path, max_parts=pipe._core.chunks)
    extra = dict(extra or {})  # the first part's: the checkpoint's entries are the same in all
    seed_step = _kept_count(path, extra, _SEED_STEP, "a step count")
    _say_other_seed(pipe, path, _kept_count(path, extra, _SEED, "a seed"))
    scaler_state = extra.pop(_SCALER, None) or None  # {}: saved by a disabled scaler
    if scaler_state is not None:
        try:
            scaler_state = scaler.checked_state(scaler_state)
        except (TypeError, ValueError, KeyError, RuntimeError) as e:
            raise ValueError(f"checkpoint '{path}': its GradScaler state is refused: {e}") \
                from e
    extra = _extras.own_extra(path, saved, layouts, pipe.rank, _extras.layout(pipe), extra)
    model = one_value_per_tie(pipe._ties, pipe.chunks, model, pipe._data.model)
    chunks = checkpoint.check_model_state(pipe.chunks, pipe._core.chunks, model, True)
    optim_state = None
    if optimizer is not None:
        if optim is None:
            raise KeyError(f"checkpoint '{path}': it holds no optimizer state (saved without "
                           "an optimizer): load it without one")
        optim_state = checkpoint.optimizer_load_state(
            pipe.chunks, optimizer, optim, pipe._canonical(),
            checkpoint.elsewhere(pipe._data.model, pipe.chunks))
    return {"chunks": chunks, "optimizer": optim_state, "seed_step": seed_step,
            "scaler": scaler_state, "extra": extra,
            # A folder of an earlier version has no token: 2**48, which no save's token is.
            "token": 2**48 if token is None else token}


def _refuse_other_saves(path, tokens):
    """Each process reads `path` for itself, and a node may hold another save under it (a
    stale copy on its own disk): the job went on with a model of two checkpoints, silently.
    Refused on every process alike, before anything is loaded. `tokens`: every process's
    save token, by job rank."""
    other = [r for r, t in enumerate(tokens) if t != tokens[0]]
    if other:
        raise ValueError(f"load: checkpoint '{path}' holds another save on process(es) {other} "
                         "than on process 0 (each process reads its own copy, from its own "
                         "disk): load one checkpoint everywhere; nothing was loaded on any "
                         "process")


def _refuse_replicas_apart(pipe, given):
    """Refuses, on every process alike, a load whose optimizer is given on a process and not on
    the same stage's process of another replica (`given`: by job rank, 1.0 where it was): the
    replicas then stepped from other moments and trained apart, silently."""
    pp = pipe.pp
    apart = [r for r in range(pp, len(given)) if given[r] != given[r % pp]]
    if apart:
        stage = apart[0] % pp
        have = [r for r in (stage, apart[0]) if given[r]]
        lack = [r for r in (stage, apart[0]) if not given[r]]
        raise ValueError(f"load: stage {stage}'s optimizer was given on process {have[0]} and "
                         f"not on process {lack[0]} (another replica); every replica's "
                         "processes pass their optimizer alike, or the replicas step from "
                         "different moments and train apart; nothing was loaded on any "
                         "process")


def _kept_count(path, extra, key, what):
    """Entry `key` the checkpoint keeps for itself, taken out of `extra`: None, or a whole
    number under 2**64 (`what` it is, for the refusal)."""
    value = extra.pop(key, None)
    if value is not None and not (is_whole(value) and 0 <= value < 1 << 64):
        raise ValueError(f"checkpoint '{path}': its {key} is {repr(value)[:40]}, not {what}")
    return value


def _say_other_seed(pipe, path, saved):
    """Warns where the checkpoint's run drew by another seed than this pipeline's: its dropout
    from here on is not the run's it continues (a resume with another seed= drew otherwise
    without a word). A checkpoint of an unseeded run, or of an earlier version, says nothing."""
    if saved is None:
        return
    mine = None if pipe._data.seeding is None else pipe._data.seeding.seed
    if mine != saved:
        warnings.warn(f"load: checkpoint '{path}' was saved by a pipeline with seed={saved}, "
                      f"this one has seed={mine}: the dropout it draws from here on is not what "
                      "the run it continues would have drawn", RuntimeWarning, stacklevel=4)


def _apply_optimizer(pipe, optimizer, state):
    """Loads the optimizer's state on every process or on none: torch's load moves the state
    to its parameters' device, which can run out of memory on one process; the others then
    take their previous state back. Returns that previous state (None without an
    optimizer)."""
    previous = None

    def here():
        nonlocal previous
        if optimizer is not None:
            previous = (optimizer.state, optimizer.param_groups)  # load_state_dict replaces both
            optimizer.load_state_dict(state)
    try:
        agreed(pipe._core, here, "load: process(es) {bad} could not load their optimizer's "
               "state; nothing was loaded on any process", call_of(pipe, "load()"))
    except BaseException:
        if previous is not None:
            optimizer.state, optimizer.param_groups = previous
        raise
    return previous  # to take back should the rest of the load fail


def _apply_rest(pipe, plan):
    """The chunks, the scaler's state and the seed's step, checked by _prepare."""
    checkpoint.apply_model_state(pipe.chunks, plan["chunks"])
    loaded = plan["scaler"]
    forget_scaler_state(pipe)
    if pipe._data.scaler is None:
        if loaded is not None:  # taken by the GradScaler made next, and saved until then
            setattr(pipe, _LOADED_SCALER, loaded)
    elif loaded is not None and pipe._data.scaler.is_enabled():
        pipe._data.scaler._set_state(loaded)  # checked; the load holds the pipeline already
    if plan["seed_step"] is not None:  # a seeded pipeline goes on drawing as it would have
        pipe._data.seed_step = plan["seed_step"]


def loaded_scaler_state(pipe):
    """The GradScaler state pipe's last load() kept for a scaler made after it, or None."""
    return getattr(pipe, _LOADED_SCALER, None)


def forget_scaler_state(pipe):
    if hasattr(pipe, _LOADED_SCALER):
        delattr(pipe, _LOADED_SCALER)
