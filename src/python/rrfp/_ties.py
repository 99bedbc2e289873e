"""Parameters that chunks on different processes share (tied weights across stages): a GPT's
input embedding reused as its output projection, with the first and last chunks on different
processes.

Each process holds its own copy of such a parameter (a holder). The copies are made equal at
construction (every holder takes the values of the holder of the lowest chunk), and each step
gives every holder the same gradient: each holder's sum over its own chunks' uses (microbatch
order, as GradSums adds them), added in the order of the holders' first chunks. Every holder
adds the same bits in the same order, so the copies get the same gradient and, stepped by the
same optimizer, stay equal, as Megatron keeps its embedding copies (an all-reduce of the two
stages' sums). It is not a plain loop's arithmetic, which adds every microbatch's uses before
the next microbatch's: that would send one gradient per microbatch instead of one per step.

The same holds for a tie declared between distinct parameters of one process (`tied=` with a
`chunk_fn` that builds them apart). A parameter that several chunks of one process use as one
object needs none of this: GradSums adds its uses as a plain loop does."""
import collections
import zlib

import torch

from . import _wire
from ._calls import BUILDING, gather
from ._launch import agreed


def _groups(tied, chunk_list, core):
    """The ties, each a sorted list of (chunk, parameter name): those declared in `tied` and,
    when every chunk is at hand (`chunk_list`) with a process per stage, every parameter that
    chunks on different stages share. A name in two ties joins them."""
    n = core.chunks
    parent = {}

    def find(m):
        while parent[m] != m:
            m = parent[m]
        return m

    def join(members):
        for m in members:
            parent.setdefault(m, m)
        for m in members[1:]:
            parent[find(m)] = find(members[0])

    for members in _declared(tied, n):
        join(members)
    if chunk_list is not None and core.world > 1:
        uses = {}  # id(param) -> [(chunk, name)]
        for c, m in enumerate(chunk_list):
            for name, p in m.named_parameters():
                uses.setdefault(id(p), []).append((c, name))
        for members in uses.values():
            if len({core.stage_of(c) for c, _ in members}) > 1:
                join(members)
    groups = {}
    for m in parent:
        groups.setdefault(find(m), []).append(m)
    return sorted(sorted(g) for g in groups.values())


def _declared(tied, n):
    if tied is None:
        return []
    if isinstance(tied, (str, bytes)) or not hasattr(tied, "__iter__"):
        raise TypeError("tied: a list of ties, each a list of parameter names 'c.name' (c the "
                        f"chunk's index), got {type(tied).__name__}")
    out, seen = [], set()
    for tie in tied:
        if isinstance(tie, (str, bytes)) or not hasattr(tie, "__iter__"):
            raise TypeError(f"tied: each tie is a list of names 'c.name', got {tie!r}")
        members = []
        for name in tie:
            if not isinstance(name, str):
                raise TypeError(f"tied: each name is a str 'c.name' (c the chunk's index), got "
                                f"{type(name).__name__} {name!r}")
            c, _, rest = name.partition(".")
            # The index as str() writes it: '00.weight' named chunk 0's parameter a second time
            # under another spelling, and '²' passed isdigit() only to fail in int().
            if not (c.isascii() and c.isdigit() and c == str(int(c))) or int(c) >= n or not rest:
                raise ValueError(f"tied: {name!r} is not a parameter name 'c.name' with the chunk "
                                 f"c in 0..{n - 1} (no leading zeros)")
            if name in seen:
                raise ValueError(f"tied: '{name}' is named twice")
            seen.add(name)
            members.append((int(c), rest))
        if len(members) < 2:
            raise ValueError(f"tied: a tie names at least two parameters, got {list(tie)!r}")
        out.append(members)
    return out


class Ties:
    """The ties of one pipeline, as this process holds them. A tie's holder is the place in
    the tie of its first name: holder 0, the holder of the tie's lowest chunk, gives its values
    to the others at construction, after a checkpoint is loaded and after a copy is replaced.
    The holders of the ties that the same stages hold exchange among those stages alone."""

    def __init__(self, groups, chunks, core):
        self._core, self._chunks = core, chunks
        local = []  # (group, holder, parameter): this process's holders
        agreed(core, lambda: _resolve(groups, chunks, local),
               "tied: process(es) {bad} could not find their parameters of a tie; their own "
               "errors say why", BUILDING)
        # Every stage's holders, their shapes and dtypes: which stages hold which tie.
        every = self._gather([(g, h, (tuple(p.shape), str(p.dtype))) for g, h, p in local])
        keep = agreed(core, lambda: _kept(groups, every),
                      "tied: the copies of a tie differ in another replica; its processes say how",
                      BUILDING)
        self.groups = [groups[gi] for gi in keep]
        self.local = [(keep.index(g), h, p) for g, h, p in local if g in keep]
        stages = {}  # tie -> the stages holding it
        for stage, g, _, _ in every:
            if g in keep:
                stages.setdefault(keep.index(g), set()).add(stage)
        self._exchanges = []  # (stages, [ties]): one exchange a set of stages, in tie order
        for g in range(len(self.groups)):
            peers = sorted(stages[g])
            same = next((e for e in self._exchanges if e[0] == peers), None)
            if same is None:
                self._exchanges.append((peers, [g]))
            else:
                same[1].append(g)
        self._index()
        self.flags = []
        self._pending = set()  # (tie, holder): replaced, not yet given holder 0's values
        self.copy_first()

    def _index(self):
        self._tie_of = {id(p): g for g, _, p in self.local}
        self.holders = set(self._tie_of)  # their step's sums start from nothing
        self.secondary = {id(p) for _, h, p in self.local if h != 0}  # norms count holder 0
        # A holder's name in checkpoints (its optimizer state): its tie's first name.
        self.canonical = {id(p): _name(self.groups[g][0]) for g, _, p in self.local}

    def refresh(self, values=False):
        """Each holder's parameter as the chunk holds it now (a copy may have been replaced),
        and what every process must agree on before a step runs (check); `values`, as a step
        starts: what each copy holds (values_print), where 0 stands for it otherwise."""
        flags, now, seen = [], [], set()
        for g, h, p in self.local:
            c, name = self.groups[g][h]
            try:
                q = self._chunks[c].get_parameter(name)
                kind = zlib.crc32(f"{tuple(q.shape)} {q.dtype}".encode())
            except AttributeError:  # gone: told to every process by check(), as a kind of -1
                q, kind = p, -1
            if (g, id(q)) in seen:  # now one object with an earlier copy: GradSums sums it
                continue
            seen.add((g, id(q)))
            if q is not p:  # pending until copy_first has run, whatever fails before
                self._pending.add((g, h))
            now.append((g, h, q))
            flags += [float(g), float(h), float(q.requires_grad), float((g, h) in self._pending),
                      float(kind), values_print(q) if values and kind != -1 else 0.0]
        if len(now) != len(self.local) or any(
                q is not p for (_, _, p), (_, _, q) in zip(self.local, now)):
            self.local = now
            self._index()
        self.flags = flags

    def check(self, replicas, mine, training=True):
        """Every replica's flags (refresh: its processes' flags one after the other), `mine`
        this process's replica. A copy gone from its chunk or replaced by one of another shape
        or dtype, and for a training step a tie that some copy trains and another freezes (in
        any replica), is refused on every process before the step runs (where the copies'
        processes alone would learn it at the step's end, and the others wait for them). A
        replaced copy then takes holder 0's values."""
        replaced, trains = False, {}
        for r, flat in enumerate(replicas):
            entries = [flat[k:k + _FLAGS] for k in range(0, len(flat), _FLAGS)]
            for gi, members in enumerate(self.groups):
                got = sorted((e for e in entries if int(e[0]) == gi), key=lambda e: e[1])
                gone = [_name(members[int(e[1])]) for e in got if e[4] == -1]
                if gone:
                    raise ValueError(f"tied: {', '.join(gone)} is no longer a parameter of its "
                                     "chunk")
                if len({e[4] for e in got}) > 1:
                    raise ValueError(
                        f"tied: a copy of '{_name(members[0])}' was replaced by a parameter of "
                        "another shape or dtype than the others; replace every copy alike")
                _refuse_drifted(members, [e for e in got if not e[3]],
                                f" in replica {r}" if len(replicas) > 1 else "")
                trains.setdefault(gi, []).extend((r, e) for e in got)
                replaced = replaced or (r == mine and any(e[3] for e in got))
        for gi, es in trains.items():
            if training and len({e[2] for _, e in es}) > 1:
                where = " in replica {}" if len(replicas) > 1 else ""
                frozen = sorted({_name(self.groups[gi][int(e[1])]) + where.format(r)
                                 for r, e in es if not e[2]})
                raise ValueError(
                    f"tied: parameter '{_name(self.groups[gi][0])}' is trained by some of its "
                    f"copies and frozen in others ({', '.join(frozen)}); freeze and unfreeze a "
                    "tie's every copy alike")
        if replaced:
            self.copy_first()

    def copy_first(self):
        """Makes every copy hold holder 0's values and gradient (at construction; after a
        checkpoint is loaded, whose entries each copy loads on its own; after a copy is
        replaced: a new copy has no gradient yet where the others may have one)."""
        entries = []
        for g, h, p in self.local:
            if h == 0:
                entries += [(g, h, "value", p), (g, h, "grad", p.grad)]
        first = {(g, i): t for g, h, i, t in self._exchange(entries) if h == 0}
        with torch.no_grad():
            for g, h, p in self.local:
                if h != 0:
                    p.copy_(first[(g, "value")])
                    grad = first[(g, "grad")]
                    p.grad = None if grad is None else grad.to(p.device, copy=True)
        self._pending.clear()

    def same_in_state(self, state):
        """`state` (a state_dict by "c.name") with every name of a tie given the entry of the
        tie's first name that it holds: each process loads its copies from one value, as if
        the tie were one parameter, where loading each copy's own entry would leave copies
        that differ in `state` (or one of them absent) apart for good: they are stepped alike
        and never made equal again."""
        return _first_everywhere(state, [[_name(m) for m in members] for members in self.groups])

    def _gather(self, entries):
        """Every stage's entries (group, holder, info) of this replica, as (stage, *entry)."""
        if self._core.world == 1:
            return [(0, *e) for e in entries]
        every = self._core.replica_all_gather(_wire.pack([(e, None) for e in entries]))
        return [(stage, *e) for stage, buf in enumerate(every) for e, _ in _wire.unpack(buf)]

    def _exchange(self, entries):
        """Every holder's entry (group, holder, info, tensor) of the ties this process holds,
        each set of stages exchanging among themselves."""
        if self._core.world == 1:
            return entries
        stage, out = self._core.local_stages()[0], []
        for peers, ties in self._exchanges:
            if stage in peers:
                packed = _wire.pack([((g, h, i), t) for g, h, i, t in entries if g in ties])
                out += [(*e, t) for buf in self._core.exchange(packed, peers)
                        for e, t in _wire.unpack(buf)]
        return out

    def sum(self, pairs, add_previous):
        """`pairs` (parameter, this process's gradient sum or None), the holders' sums started
        from nothing: the holders' gradients become their tie's sum (plus the .grad each had,
        with add_previous). check() has made sure the copies train alike."""
        grads = {id(p): g for p, g in pairs}
        mine = []
        for g, h, p in self.local:
            t = grads.get(id(p))
            mine.append((g, h, None, t.to_dense() if t is not None and t.is_sparse else t))
        got = sorted(self._exchange(mine), key=lambda e: (e[0], e[1]))
        totals = {g: _added([t for g2, _, _, t in got if g2 == g and t is not None])
                  for g in set(self._tie_of.values())}
        out, given = [], set()
        for p, g in pairs:
            tie = self._tie_of.get(id(p))
            if tie is not None:
                g = totals[tie]
                if g is not None:
                    g = g.to(p.device, copy=tie in given)  # each holder its own tensor
                    given.add(tie)
                    if add_previous and p.grad is not None:
                        g = p.grad + g
            out.append((p, g))
        return out


_FLAGS = 6  # a holder's flags (refresh): tie, holder, trained, pending, kind, values_print


def values_print(p):
    """A copy's bytes read as 32-bit integers and summed modulo 2**32 (a double holds it
    exactly, and the sum is exact in any order, on any device and thread count): equal copies
    give equal sums, and copies that drifted apart, by one value's last bit too, nearly always
    other sums. One read of the copy a step, 5 ms for GPT-2's 50,257 x 768 float32 embedding on
    one core here, where the output projection's product reads it once a microbatch (summed
    into 64-bit integers it took 1 s: torch's widening sum is not vectorized)."""
    x = p.detach()
    if x.layout != torch.strided or x.is_meta or x.numel() == 0:
        return 0.0
    if x.is_complex():
        x = torch.view_as_real(x.resolve_conj())
    b = x.contiguous().reshape(-1).view(torch.uint8)
    if b.numel() % 4:
        b = torch.cat([b, b.new_zeros(4 - b.numel() % 4)])
    return float(int(b.view(torch.int32).sum(dtype=torch.int32)) % 2**32)


def _refuse_drifted(members, held, where):
    """`held`: the flags of a tie's copies in one replica that are not replaced (those take
    the first copy's values before the step): they must hold the same values. Copies stepped
    apart (weight decay on one copy alone: a model's usual parameter groups decay a Linear's
    weight and not an Embedding's, which here are one tie; one copy left out of the optimizer;
    another learning rate) or changed in place on one process (a padding row zeroed) drift
    apart, each process then training with its own copy's values: silently, with no error."""
    prints = {}
    for e in held:
        prints.setdefault(e[5], []).append(_name(members[int(e[1])]))
    if len(prints) > 1:
        apart = "; ".join(", ".join(names) for names in prints.values())
        raise ValueError(
            f"tied: the copies of '{_name(members[0])}'{where} hold different values ({apart}); "
            "they stay equal only when each is changed alike: give every copy the same "
            "optimizer settings (weight decay, learning rate, parameter group), clip with the "
            "pipeline's clip_grad_norm_ (a process's own clips by its own norm), and make a "
            "change in place to every copy, or replace a copy (it then takes the first copy's "
            "values)")


def one_value_per_tie(ties, chunks, state, model=None):
    """`state` (by "c.name") as a load takes it into `chunks` ({index: module}, this process's):
    every name of a tied parameter given the entry of its first name that `state` holds, for
    the copies of a tie (`ties`, or None) and for a tensor (parameter or buffer) that chunks
    hold as one object alike, so that every layout loads the same value. torch's
    load_state_dict copies each chunk's entry into the one object in turn: the last chunk's
    entry won where copies took the first's, and a state naming the tie once was refused
    (KeyError: the other chunk's name missing) where copies loaded it. `model` (every chunk,
    where the pipeline was given them all) tells which of this process's buffers other
    processes' chunks share: with a process per stage each holds its own copy, which loads
    the shared buffer's first name's entry as the one object does in threads."""
    if ties is not None:
        state = ties.same_in_state(state)
    groups = [] if model is None else _shared(model)
    return _first_everywhere(state, groups + _shared(chunks))


def _shared(chunks):
    """Names ("c.name": by chunk, then in the chunk's state_dict order) of each tensor that
    several entries of `chunks` ({index: module}) hold as one object. Every state_dict is kept
    until the end: a module that saves a tensor it makes in the call (a quantized Linear's
    scale) frees it with its dict, and the next chunk's new tensor could take its id, two
    unrelated entries then loading one value."""
    states = [(c, chunks[c].state_dict(keep_vars=True)) for c in sorted(chunks)]
    names = {}
    for c, state in states:
        for name, value in state.items():
            if isinstance(value, torch.Tensor):
                names.setdefault(id(value), []).append(f"{c}.{name}")
    return [n for n in names.values() if len(n) > 1]


def _first_everywhere(state, groups):
    """`state` with every name of each group (a list of names) given the entry of the group's
    first name that `state` holds; a copy where any changes, with torch's version metadata
    kept (checkpoint._filled_by_torch reads it)."""
    out = None
    for names in groups:
        first = next((n for n in names if n in state), None)
        if first is None:
            continue
        for n in names:
            if n != first and state.get(n) is not state[first]:
                if out is None:
                    out = collections.OrderedDict(state)
                    if getattr(state, "_metadata", None) is not None:
                        out._metadata = state._metadata
                out[n] = state[first]
    return state if out is None else out


def _added(ts):
    """The holders' sums added in holder order (None: none had one), into a new tensor where
    there are two or more; one is passed on as it is."""
    if len(ts) < 2:
        return ts[0] if ts else None
    total = ts[0] + ts[1].to(ts[0].device)
    for t in ts[2:]:
        total.add_(t.to(total.device))
    return total


def _resolve(groups, chunks, local):
    """This process's holders of each tie, into `local`."""
    for gi, members in enumerate(groups):
        held = set()
        for k, (c, name) in enumerate(members):
            if c not in chunks:
                continue
            try:
                p = chunks[c].get_parameter(name)
            except AttributeError as e:
                raise ValueError(f"tied: chunk {c} has no parameter '{name}'") from e
            if id(p) not in held:
                held.add(id(p))
                local.append((gi, k, p))


def _name(member):
    return f"{member[0]}.{member[1]}"


def _kept(groups, every):
    """The ties held by more than one copy (one copy is one parameter, which GradSums sums
    exactly), each tie's copies alike: the same shape and dtype everywhere."""
    keep = []
    for gi, members in enumerate(groups):
        mine = sorted(((h, info) for _, g, h, info in every if g == gi), key=lambda e: e[0])
        _refuse_unlike(members, mine)
        if len(mine) > 1:
            keep.append(gi)
    return keep


def _refuse_unlike(members, mine):
    """The holders of a tie must be alike: the same shape and dtype everywhere."""
    h0, (shape, dtype) = mine[0]
    for h, (s, d) in mine[1:]:
        if s != shape or d != dtype:
            raise ValueError(
                f"tied: '{_name(members[h0])}' ({shape}, {dtype}) and '{_name(members[h])}' "
                f"({s}, {d}) cannot be one parameter")


def make_ties(tied, chunk_list, chunks, core):
    """The pipeline's Ties, or None where no tie needs more than GradSums (none declared and,
    with a process per stage, none across processes)."""
    groups = agreed(core, lambda: _groups(tied, chunk_list, core),
                    "tied: process(es) {bad} refused the ties; their own errors say why", BUILDING)
    if core.world > 1:
        crc = float(zlib.crc32(repr(groups).encode()))
        if len({v[0] for v in gather(core, BUILDING, [crc])}) > 1:
            raise ValueError("tied: the processes found different ties (pass the same `tied` "
                             "and build the same chunks on every process)")
    if not groups:
        return None
    ties = Ties(groups, chunks, core)
    return ties if ties.groups else None
