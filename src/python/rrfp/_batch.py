"""The batch a step is given: split into microbatches, and checked before any task runs (no
gradient expected from the inputs or targets, the same batch on every process of a replica,
with what else the processes must agree on before a step: check_before_step)."""
import zlib

import torch

from ._caller import AUTOCAST_DEVICES
from ._calls import call_of, gather
from ._modes import mode_values, refuse_other_modes
from ._scaler_job import scales_apart
from ._tree import describe, tensors_in


def digest(microbatches, found):
    """A CRC-32 over the microbatches' structures and non-tensor values (describe) and their
    tensors (`found`: each one's, wherever they sit in it; their layouts, shapes, dtypes and
    values), the same in every process that holds the same batch."""
    crc = 0
    for mb, tensors in zip(microbatches, found):
        crc = zlib.crc32(describe(mb), crc)
        for x in tensors:  # a tuple's or a dict's tensors too, not only a tensor's
            crc = _tensor_crc(x.detach(), crc)
    return crc


# The compressed sparse layouts' index tensors: (compressed, plain).
_COMPRESSED = {torch.sparse_csr: ("crow_indices", "col_indices"),
               torch.sparse_bsr: ("crow_indices", "col_indices"),
               torch.sparse_csc: ("ccol_indices", "row_indices"),
               torch.sparse_bsc: ("ccol_indices", "row_indices")}


def _tensor_crc(x, crc):
    """`crc` carried over tensor `x`: what it holds, whatever its layout. A sparse or nested
    tensor has no bytes of its own to read (NumPy refused it, so a first chunk that takes a
    sparse batch failed in every process before its step), so its parts are read: a sparse
    one's indices and values, coalesced (the same tensor whether or not its duplicates were
    summed yet), a compressed one's index tensors and values, a nested one's tensors."""
    if x.is_nested:  # no shape of its own: its tensors have theirs
        crc = zlib.crc32(f"nested {x.size(0)} {x.dtype}".encode(), crc)
        for part in x.unbind():
            crc = _tensor_crc(part, crc)
        return crc
    crc = zlib.crc32(f"{x.layout} {tuple(x.shape)} {x.dtype}".encode(), crc)
    if x.layout == torch.sparse_coo:
        x = x.coalesce()
        parts = [x.indices(), x.values()]
    elif x.layout in _COMPRESSED:
        parts = [getattr(x, name)() for name in _COMPRESSED[x.layout]] + [x.values()]
    elif x.layout != torch.strided:  # mkldnn
        parts = [x.to_dense()]
    elif x.is_quantized:
        parts = [x.int_repr()] + _quantization(x)
    else:
        parts = [x]
    for part in parts:
        crc = zlib.crc32(_bytes(part), crc)
    return crc


def _quantization(x):
    """What maps a quantized tensor's integers to its values."""
    if x.qscheme() in (torch.per_tensor_affine, torch.per_tensor_symmetric):
        return [torch.tensor([x.q_scale(), float(x.q_zero_point())], dtype=torch.float64)]
    return [x.q_per_channel_scales(), x.q_per_channel_zero_points(),
            torch.tensor([x.q_per_channel_axis()])]


def _bytes(x):
    """A strided tensor's values as bytes, of any dtype (NumPy takes no bfloat16 and no
    complex32, and no tensor whose conjugate or negative bit is set); a meta tensor has none."""
    if x.is_meta:
        return b""
    x = x.cpu().resolve_conj().resolve_neg().contiguous()
    return x.reshape(-1).view(torch.uint8).numpy().tobytes()


def refuse_grad_outside(found, name, instead):
    """A plain loop's backward goes on from the inputs and targets into whatever graph made
    them (an encoder outside the pipeline, a leaf that wants its gradient); a step's backward
    ends at the chunks, so such a gradient would silently be missing: refused instead.
    `found`: each microbatch's tensors."""
    for mb, tensors in enumerate(found):
        if any(t.requires_grad for t in tensors):
            raise ValueError(
                f"{name}: microbatch {mb} holds a tensor that requires grad; a step's backward "
                f"ends at the chunks' parameters and does not reach the {name} or what computed "
                f"them, where a plain loop's would: pass them detached (.detach()), or compute "
                f"them {instead}")


def split(batch, m, name):
    if isinstance(batch, tuple):
        # torch.distributed.pipelining's step(x, mask) splits each tensor; a list here is the
        # microbatches. A tuple of M was read as M microbatches, so (x, mask) with M = 2 ran x
        # and mask as two microbatches without a word.
        raise TypeError(f"{name}: got a tuple; give a list of {m} microbatches (each may be a "
                        "tuple), or one tensor to split evenly. A batch of several tensors, "
                        f"split: list(zip(*(t.tensor_split({m}) for t in (x, mask))))")
    if isinstance(batch, list):
        if len(batch) != m:
            raise ValueError(f"{name}: expected {m} microbatches, got {len(batch)}")
        return list(batch)
    if isinstance(batch, torch.Tensor):
        if batch.is_nested or batch.layout != torch.strided:
            # torch.tensor_split takes strided tensors alone: it failed on them with c10's
            # NotImplementedError (as_strided on a sparse tensor) and its C++ stack.
            kind = "nested" if batch.is_nested else str(batch.layout)
            raise TypeError(f"{name}: a {kind} tensor cannot be split into {m} microbatches "
                            f"(only a strided one can); give a list of {m} microbatches")
        if batch.dim() == 0:  # said to hold 0 rows, which read as an empty batch
            raise ValueError(f"{name}: a tensor of no dimensions (a scalar) has no dimension 0 "
                             f"to split into {m} microbatches; give a batch with one row per "
                             f"sample, or a list of {m} microbatches")
        rows = batch.shape[0]
        if rows == 0:  # "does not split evenly" suggested a count to change
            raise ValueError(f"{name}: an empty batch (0 rows) has no row for any of its {m} "
                             "microbatches")
        if rows < m or rows % m:
            raise ValueError(f"{name}: a batch of {rows} rows does not split evenly into {m} "
                             f"microbatches; give a list of {m} microbatches to choose their "
                             "sizes")
        return list(torch.tensor_split(batch, m))
    raise TypeError(f"{name}: expected a tensor or a list of {m} microbatches, "
                    f"got {type(batch).__name__}")


def refuse_split_against_list(inputs, targets, found):
    """One side given as a list of microbatches of chosen sizes and the other as one batch,
    split evenly: where the rows differ, microbatch k's inputs would meet other rows' targets,
    which a loss that broadcasts takes without a word. `found`: each side's microbatches'
    tensors (take_batch's)."""
    if targets is None or isinstance(inputs, torch.Tensor) == isinstance(targets, torch.Tensor):
        return
    rows = {name: [_rows(tensors) for tensors in side]
            for name, side in (("inputs", found[0]), ("targets", found[1]))}
    if None in rows["inputs"] or None in rows["targets"] or rows["inputs"] == rows["targets"]:
        return
    whole, listed = ("inputs", "targets") if isinstance(inputs, torch.Tensor) else \
        ("targets", "inputs")
    raise ValueError(f"{whole}: one batch, split evenly into microbatches of {rows[whole]} rows, "
                     f"but the {listed} came as a list of microbatches of {rows[listed]} rows; "
                     f"give the {whole} as a list of the same sizes (a list is read as "
                     f"microbatches: where the {listed} are one batch of several tensors, as a "
                     f"DataLoader collates samples of several, split each of those tensors into "
                     f"{len(rows[whole])} with tensor_split and give the list of the tuples zip "
                     f"makes of them)")


def _rows(tensors):
    """A microbatch's rows, from its tensors: a tensor's first dimension, or that of every
    tensor in a tuple or a dict of them where they agree (the rows of (x, mask) were not
    counted, so such a list met other rows' targets without a word); None where they cannot be
    told."""
    rows = {t.size(0) for t in tensors if t.dim() > 0}  # a nested tensor has no shape
    return rows.pop() if len(rows) == 1 else None


def _strided(x):
    return isinstance(x, torch.Tensor) and not x.is_nested and x.layout == torch.strided


def take_batch(pipe, inputs, targets, m, training):
    """Splits the step's batch into pipe._data's microbatches after checking what needs no other
    process: each microbatch's tensors (found once), inputs first. Raises on what it refuses."""
    # Inference mode with enable_grad() inside it too: every forward ran, then the step said no
    # parameter required grad, naming none of the two.
    if training and (not torch.is_grad_enabled() or torch.is_inference_mode_enabled()):
        # Named as the caller wrote it: inference_mode was said to be no_grad.
        mode = "inference_mode" if torch.is_inference_mode_enabled() else "no_grad"
        raise RuntimeError(f"step: called under torch.{mode}(), but a step trains (it runs the "
                           "backward and adds to .grad); use eval_step for forwards only")
    # Strided tensors alone: a nested, sparse or MKL-DNN batch reaches split()'s TypeError
    # (a nested one's components were taken for rows, and the caller told to mend a count).
    if _strided(inputs) and _strided(targets) and \
            inputs.dim() > 0 and targets.dim() > 0 and inputs.size(0) != targets.size(0):
        raise ValueError(f"inputs and targets: {inputs.size(0)} and {targets.size(0)} "
                         "rows; a batch needs one target row per input row")
    pipe._data.inputs = split(inputs, m, "inputs")
    pipe._data.targets = None if targets is None else split(targets, m, "targets")
    found = ([tensors_in(x) for x in pipe._data.inputs],
             [tensors_in(y) for y in pipe._data.targets or []])
    refuse_split_against_list(inputs, targets, found)
    if training:
        refuse_grad_outside(found[0], "inputs", "inside the first chunk")
        refuse_grad_outside(found[1], "targets", "inside loss_fn")
    return found


def gather_call(pipe, call, values):
    """Every process's `values` (by job rank) in one all-gather over the job, once every process
    is found making the same `call` after as many steps (_calls.gather)."""
    return gather(pipe._core, call_of(pipe, call), values)


def check_before_step(pipe, found, layout, training, caller, refusal=None):
    """What every process of the job must agree on before a step runs, in one gather, each
    refused on every process (raised where it fails alone, the others would wait for it in
    the step's collectives until their timeout):
    - Every process makes the same call, step() or eval_step() (gather_call).
    - No process refused its batch (`refusal`: what take_batch raised here, then raised here;
      the others raise RuntimeError naming its job rank).
    - The processes of a replica pass the same batch: the first stage takes the inputs and
      the last the targets, each from its own process's call, so inputs would be trained
      against another batch's targets. A digest of each process's batch is compared. (torch's
      generator starts from a different seed in every process: seed it alike.)
    - With dp > 1, every replica trains the same parameters of a stage (the layout marks).
    - Every process scales the loss alike (_refuse_other_scales).
    - Every process runs the step under the same autocast (`caller`'s, a CallerState:
      _refuse_other_autocast).
    - The copies of a chunk held by several processes are in the same train()/eval() modes
      (rrfp._modes).
    - The ties' copies agree (Ties.check).
    Returns whether any process's replica buffers may be apart from replica 0's (a step that
    failed leaves each replica's as its forwards left them: pipe._buffers_apart), which every
    process then copies from replica 0 before the step, alike."""
    call = "step()" if training else "eval_step()"
    mine = [1.0, 0.0, 0.0] if refusal is not None else \
        [0.0, float(digest(pipe._data.inputs, found[0])),
         float(digest(pipe._data.targets or [], found[1]))]
    modes = mode_values(pipe)  # as long on every process; the ties' flags are not
    every = gather_call(pipe, call, mine + [_loss_scale(pipe),
                                            -1.0 if layout is None else float(layout),
                                            float(_autocast_code(caller.autocast)),
                                            float(pipe._buffers_apart)] + modes +
                        (pipe._ties.flags if pipe._ties else []))
    if refusal is not None:
        raise refusal
    refused = [r for r, v in enumerate(every) if v[0]]
    if refused:
        raise RuntimeError(f"{call[:-2]}: job rank(s) {refused} refused the batch they were given "
                           "or failed to set the step up (their own errors say why); no "
                           "process ran the step")
    pp, dp = pipe.pp, pipe._dp
    for r in range(dp):
        peers = every[r * pp:(r + 1) * pp]
        # Which differ, by name: targets=None on a stage that reads none is no seeding matter.
        which = [name for i, name in ((1, "inputs"), (2, "targets"))
                 if any(p[i] != peers[0][i] for p in peers)]
        if which:
            ranks = [r * pp + k for k, p in enumerate(peers) if p[1:3] != peers[0][1:3]]
            raise ValueError(
                f"{', '.join(which)}: the processes of a replica passed different "
                f"{' and '.join(which)} to {call}{f' (replica {r})' if dp > 1 else ''}: job "
                f"rank(s) {ranks} differ from rank {r * pp}; each must pass the same batch, "
                "targets included (None on one and a tensor on another differ; seed torch's "
                "generator alike in every process, e.g. torch.manual_seed(0), or load the same "
                "data; a chunk drawing random numbers, dropout without the pipeline's `seed`, "
                "moves the generator of its own process alone, and a shuffling DataLoader's "
                "next order with it: give the loader a generator of its own, or pass seed=)")
    if training:
        _refuse_other_scales(call, [v[3] for v in every])
    _refuse_other_autocast(call, [int(v[5]) for v in every])
    refuse_other_modes(call, [v[7:7 + len(modes)] for v in every])
    for s in range(pp):
        marks = [every[r * pp + s][4] for r in range(dp)]
        bad = next((r for r, v in enumerate(marks) if v != marks[0]), None)
        if bad is not None:
            raise ValueError(
                f"dp: the replicas train different parameters on stage {s} (replica 0 and "
                f"replica {bad}), or parameters of other shapes or dtypes; every replica must "
                "freeze, unfreeze and replace alike")
    if pipe._ties is not None:
        pipe._ties.check([[x for s in range(pp) for x in every[r * pp + s][7 + len(modes):]]
                          for r in range(dp)], pipe.replica, training)
    return any(v[6] for v in every)


def _loss_scale(pipe):
    """The factor this process's GradScaler scales a step's losses by (1: none, or disabled)."""
    scaler = pipe._data.scaler
    return float(scaler.get_scale()) if scaler is not None and scaler.is_enabled() else 1.0


def _refuse_other_scales(call, scales):
    """The last stage scales each loss by its process's GradScaler and every stage unscales by
    its own: a scaler disabled, left out or of another scale on some process stepped stage 0
    with gradients 65536 times too large, silently."""
    said = scales_apart(scales, " (no GradScaler, or a disabled one)")
    if said is not None:
        raise ValueError(f"{call[:-2]}: the processes scale the loss differently ({said}); make "
                         "a GradScaler alike on every process (enabled, init_scale, growth and "
                         "backoff settings, the same loaded state); no process ran the step")


# The dtypes autocast runs in, numbered for the job's gather (0: autocast off).
_AUTOCAST_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _autocast_code(autocast):
    """`autocast` (CallerState.autocast: each device type it is on for, with its dtype), which
    every task of the step runs under, as one number: per device type, 0 when off, else 1 +
    its dtype's place (len + 1: another dtype)."""
    on = dict(autocast)
    code = 0
    for device in AUTOCAST_DEVICES:
        place = 0
        if device in on:
            place = (_AUTOCAST_DTYPES.index(on[device]) if on[device] in _AUTOCAST_DTYPES
                     else len(_AUTOCAST_DTYPES)) + 1
        code = code * 8 + place
    return code


def _autocast_text(code):
    said = []
    for device in reversed(AUTOCAST_DEVICES):
        code, place = divmod(code, 8)
        if place:
            dtype = (str(_AUTOCAST_DTYPES[place - 1]).replace("torch.", "")
                     if place <= len(_AUTOCAST_DTYPES) else "another dtype")
            said.append(f"{device} {dtype}")
    return "autocast " + " and ".join(reversed(said)) if said else "no autocast"


def _refuse_other_autocast(call, codes):
    """Each stage's tasks run under its own process's autocast: one process entering
    torch.autocast around the step and another not trained a model of mixed precisions
    silently (or failed on mismatched dtypes, naming none of it)."""
    other = [r for r, c in enumerate(codes) if c != codes[0]]
    if other:
        raise ValueError(f"{call[:-2]}: the processes run it under different autocast (job rank "
                         f"0 under {_autocast_text(codes[0])}, job rank(s) {other} under "
                         f"{_autocast_text(codes[other[0]])}); enter torch.autocast alike on "
                         "every process; no process ran the step")
