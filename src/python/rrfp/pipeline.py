"""rrfp.Pipeline: the user's nn.Module chunks, pipelined by rrfp's C++ runtime."""
import types
from collections.abc import Mapping

import torch

from . import _rrfp, _saving, checkpoint
from ._args import arrival_after, check_arguments, chunk_builder, progress_after
from ._calls import BUILDING, gather, pipeline_number
from ._clip import clip_grad_norm
from ._device import StageDevice, module_device, parse_device
from ._grads import warn_inexact
from ._replicas import from_first_replica, replicated, settle_buffers, sum_over_replicas
from ._live import LIVE, Calls
from ._children import claim_job_place, refuse_job_child
from ._chunk_checks import refuse_data_parallel_wrappers, refuse_lazy_parameters
from ._c10d import c10d_groups, global_ranks, release_groups_with
from ._launch import agree_options, agreed, launched_transport
from ._order import check_state_kept, decide_order, refuse_renormalizing_embeddings
from ._seed import Seeding
from ._sharing import refuse_weight_set_across_stages, release_parameters
from ._stage import StageRunner
from ._step_data import StepData
from ._step import eval_outputs, replica_loss, run_pass, set_up_step, warn_held_leaves, \
    write_grads
from ._ties import make_ties, one_value_per_tie
from .record import StepRecord

StageError = _rrfp.StageError


class Pipeline:
    """Pipelines a model's chunks over `pp` stages with readiness-first dispatch.

    chunks: the model's P*V chunks in model order: a list of nn.Module, or a function
        chunk_fn(i) -> nn.Module called only for the chunks this process runs.
    loss_fn(output, target) -> scalar tensor: called on the last chunk's output. A step's
        gradients are those of the sum of the microbatch losses (scale inside loss_fn for a
        mean).
    hint: a schedule name ("1f1b", "gpipe", "zb-h1", ...) or rule ("bf", "bfw"), or a hint
        file; policy "ready" (dispatch the best-ranked ready task) or "fixed" (the hint's order).
    split_backward: "auto" (on for hints that schedule W tasks: bfw, adaptive, zb-*), "on" or
        "off". Split, B computes only the chunk's input gradient and keeps the graph; W
        computes the parameter gradients from it later.
    limit: back-pressure on activations in flight per stage under the ready policy: forwards
        done beyond backwards done (None or 0, as the command takes it: the hint's own peak;
        with policy "fixed", whose list decides them, a ValueError). With two or more chunks
        a stage, a microbatch draining through them may pass it by that many.
    max_pending_w: split backward, the most W tasks a stage may defer, each holding what it
        needs until it runs (None or 0: pp).
    timeout: seconds without progress before a step fails with TimeoutError (0: never).
    arrival_timeout: with a process per stage, seconds a process waits for the others to come
        to the same call (construction, step(), save(), ...): one may pause alone between calls
        this long (rank 0 evaluating or saving). At least `timeout`; 0: no limit; the default
        is torch.distributed's 30 minutes.
    transport: "inproc" (every stage a thread of this process), "mpi" (one stage per process
        of an `mpirun -np pp*dp python script.py` job) or "c10d" (one stage per rank of a
        torch.distributed group: `group`, or the default group, initialised with Gloo from
        torchrun's environment if need be; over a group of another backend, NCCL say, the
        pipeline talks through Gloo groups of the same ranks). None (the default) picks by how
        the process was started: "mpi" under mpirun, "c10d" under torchrun, "inproc"
        otherwise; a launcher whose process count is not pp * dp is refused. With a process
        per stage, chunk_fn builds only the chunks of this process, and every process must give
        the same schedule's options (pp, vpp, dp, placement, microbatches, hint, policy,
        split_backward, comm, limit, max_pending_w, seed, ordered_forwards): any that differ
        are refused on every process (ValueError naming them).
    dp: data-parallel replicas (transport "mpi" or "c10d"): each replica runs its own
        microbatches; the gradients of the replicas are summed in replica order, the same bits
        on every replica. Process r is replica r // pp, stage r % pp.
    delay_fn(stage, kind, chunk, mb) -> seconds: an optional delay before each task, to test
        that results do not depend on the order tasks run in.
    progress: a step that runs longer than this many seconds shows a line on stderr with the
        tasks this process has done, updated twice a second and erased at the end; "auto"
        (the default): 2 seconds when stderr is a terminal, else never; None or inf: never.
    ordered_forwards: whether each chunk's forwards run in microbatch order, as a plain loop
        runs them. Batch norm's running statistics (and any state a forward updates) come out
        of a step bitwise as a plain loop leaves them only then; gradients are bitwise in any
        order. Ready dispatch mostly keeps that order anyway, but not always: the "adaptive"
        hint reorders forwards by measured costs and sizes, and messages from another process
        may overtake each other. None (the default): on when some chunk holds a module whose
        forward updates its buffers (BatchNorm, InstanceNorm with track_running_stats,
        spectral norm, quantization observers), agreed over the processes of a job; True for
        state of your own modules; False to leave the order free. A hint list that orders some
        chunk's forwards otherwise is refused (ValueError), and so is such a module shared by
        two chunks (unless False).
    seed: None (the default): chunks draw random numbers (dropout) from torch's generators in
        the order tasks run, which differs from a plain loop's and, with stages as threads,
        from run to run. A whole number in 0..2**64-1: before each forward, torch's generators
        are seeded with rrfp.task_seed(seed, step, chunk, mb), so every schedule and run draws
        the same; with several stages in this process their tasks then take turns. save() and
        load() keep the step count.
    device: "cpu", "cuda", "cuda:N" or a torch.device: the chunks of this process are moved
        there (Module.to, so an optimizer built before keeps its parameters), and so are each
        microbatch's inputs and targets. None (the default): each chunk runs where its
        parameters are. On a GPU every stage has a CUDA stream of its own, and a task counts as
        done when its kernels have completed. Raises ValueError for what is not a device,
        RuntimeError for CUDA where torch sees none.
    tied: parameters that are one parameter though chunks on different processes hold them
        (tied weights across stages): a list of ties, each a list of names "c.name" (c the
        chunk's index, name as in its named_parameters()), e.g. [["0.tok.weight",
        "3.head.weight"]]. With `chunks` a list they are found by themselves (a parameter that
        chunks of different stages share); a chunk_fn builds only this process's chunks, so
        name them. Each process keeps a copy, made equal to the lowest chunk's at
        construction; each step every copy gets the same gradient, the sum of the copies'
        own sums added in chunk order (not a plain loop's rounding: that would need one
        exchange per microbatch). Step every copy with the same optimizer.
    """

    def __init__(self, chunks, loss_fn, *, pp, vpp=1, placement="loop", microbatches=8,
                 hint="bf", policy="ready", limit=None, max_pending_w=None,
                 split_backward="auto", comm="async", timeout=120.0, transport=None,
                 dp=1, group=None, delay_fn=None, progress="auto", device=None,
                 ordered_forwards=None, seed=None, tied=None, arrival_timeout=1800.0):
        counts = dict(pp=pp, vpp=vpp, microbatches=microbatches, dp=dp)
        hint = check_arguments(
            loss_fn=loss_fn, delay_fn=delay_fn, timeout=timeout, arrival_timeout=arrival_timeout,
            counts=counts, names=dict(placement=placement, policy=policy,
                                      split_backward=split_backward, comm=comm),
            hint=hint, transport=transport, group=group, limit=limit,
            max_pending_w=max_pending_w, ordered_forwards=ordered_forwards)
        pp, vpp, microbatches, dp = (counts[k] for k in ("pp", "vpp", "microbatches", "dp"))
        limit, max_pending_w = limit or None, max_pending_w or None  # 0: the default too
        progress = progress_after(progress)
        place = parse_device(device)
        seeding = None if seed is None else Seeding(seed, timeout)  # a bad seed fails first
        refuse_job_child(transport, group)
        if transport is None:
            transport = launched_transport(pp, dp, group)
        claim_job_place(transport)
        if group is not None and transport != "c10d":  # it was taken and ignored
            raise ValueError(f"group: the processes of a c10d pipeline; transport={transport!r} "
                             "takes none (leave group out, or give transport='c10d')")
        building = [True]  # until the end: a pipeline freed before, its building failed
        self._make_core(transport, group, timeout, arrival_after(timeout, arrival_timeout),
                        building, pp=pp, vpp=vpp, microbatches=microbatches,
                        placement=placement, split_backward=split_backward, hint=hint,
                        policy=policy, limit=limit or 0, max_pending_w=max_pending_w or 0,
                        comm=comm, dp=dp)
        # Where the processes meet: one may build its Pipeline up to arrival_timeout late (a
        # second pipeline of a layout alive under mpirun meets nowhere before).
        gather(self._core, BUILDING, [])
        self._core.take_layout()  # only now: the split is a collective of its own
        agree_options(self._core, dict(
            pp=pp, vpp=vpp, dp=dp, placement=placement, microbatches=microbatches, hint=hint,
            policy=policy, split_backward=split_backward, comm=comm, limit=limit,
            max_pending_w=max_pending_w, seed=seed, ordered_forwards=ordered_forwards))
        if max_pending_w is not None and not self._core.split_backward:  # taken and ignored
            raise ValueError(f"max_pending_w: caps the W tasks a split backward defers; this "
                             f"pipeline's backward is whole (split_backward={split_backward!r} "
                             f"with hint={hint!r}: give split_backward='on' to split it)")
        self._dp = dp
        self._buffers_apart = False  # set as a pass begins under dp > 1, cleared once settled
        build, chunks = chunk_builder(chunks, self._core.chunks)
        self._progress = progress
        self._data = StepData(loss_fn, delay_fn)
        self._inexact_said = set()  # tied parameters warned of (warn_inexact)
        self._held_said = False  # a tensor outside the model warned of (warn_held_leaves)
        self._runners = []
        self._chunks = {}  # chunk index -> module, the chunks this process runs
        self._data.chunks = self._chunks
        self._chunks_view = types.MappingProxyType(self._chunks)
        if chunks is not None:  # every chunk, built: another process's is known too
            self._data.model = dict(enumerate(chunks))
        agreed(self._core, lambda: self._build_stages(build, place),
               "chunks: process(es) {bad} could not build their chunks; their own errors say "
               "why", BUILDING)
        self._ties = make_ties(tied, chunks, self._chunks, self._core)
        if dp > 1:  # replicas start from the first one's parameters and buffers, as under DDP
            agreed(self._core, lambda: from_first_replica(self._core, replicated(self), True),
                   "chunks: process(es) {bad} could not take replica 0's parameters and "
                   "buffers; their own errors say why", BUILDING)
        decide_order(ordered_forwards, self.chunks, self._core, loss_fn)
        self._ordered_arg = ordered_forwards  # check_state_kept's, each step
        if seeding is not None:
            seeding.place(self.replica * self._core.microbatches)
            self._data.seeding = seeding
        self._core.set_runners(self._runners)
        self._step = 0
        self._number = pipeline_number(transport)  # once made on every process: the tags'
        self._wrappers_checked = False  # a chunk wrapped since it was built (set_up_step)
        self.last_step = None
        self._calls = Calls(transport)  # one step, load, save or clip at a time
        LIVE.add(self)
        building[0] = False

    def _make_core(self, transport, group, timeout, arrival, building, **options):
        """Its PipelineCore, on the groups c10d_groups makes for it under c10d, which go with
        this Pipeline, or at once where the core is refused."""
        # The groups wait `timeout` and the time a stalled process takes to say what stalled.
        waits = float(timeout) + _rrfp.job_grace_s if timeout > 0 else 0.0
        groups = c10d_groups(group, options["pp"], options["dp"], waits, arrival) \
            if transport == "c10d" else {}
        try:
            self._core = _rrfp.PipelineCore(
                timeout=float(timeout), arrival_timeout=arrival, transport=transport, **options,
                **groups, global_ranks=global_ranks(group) if groups else None)
        except BaseException:
            release_groups_with(self, None, groups, group, building)
            # Held by this frame as long as the caller holds the exception (pytest.raises, a
            # list of errors), they kept the others waiting out their arrival_timeout.
            groups.clear()
            raise
        release_groups_with(self, self._core, groups, group, building)

    def _build_stages(self, build, place):
        """Builds this process's chunks and their stages' runners (a chunk refused here, or a
        chunk_fn that raised, is told to every process: the caller runs this under agreed)."""
        stages = {}
        for stage in self._core.local_stages():
            modules = stages[stage] = {}
            for c in self._core.chunks_of(stage):
                m = build(c)
                if not isinstance(m, torch.nn.Module):
                    raise TypeError(f"chunks: chunk {c} is a {type(m).__name__}, not an "
                                    "nn.Module")
                refuse_data_parallel_wrappers(c, m)
                refuse_lazy_parameters(c, m)
                refuse_renormalizing_embeddings(c, m)
                modules[c] = m if place is None else m.to(place)
                self._chunks[c] = modules[c]
            where = StageDevice(place or module_device(modules.values()),
                                held=self._core.holds_messages)
            self._runners.append(StageRunner(stage, modules, self._core.chunks - 1,
                                             self._core.split_backward, self._data, place,
                                             where))
        refuse_weight_set_across_stages(stages)

    @property
    def pp(self):
        return self._core.pp

    @property
    def chunks(self):
        """The chunks this process runs, by index in model order: a read-only view. The steps
        run the modules the pipeline was built with; a module put in their place here trained
        nothing (the gradients went to the one that runs) while state_dict() and save() took
        its untrained weights."""
        return self._chunks_view

    @property
    def ordered_forwards(self):
        """Whether each chunk's forwards run in microbatch order (the argument, resolved)."""
        return self._core.ordered_forwards

    @property
    def rank(self):
        """This process's rank in the pipeline's group: the job's, but in a `group=` of some of
        its processes, the rank in that group, as the messages that name ranks count them (0
        in-process)."""
        return self._core.rank

    @property
    def replica(self):
        """This process's data-parallel replica (transport "mpi" with dp > 1; else 0)."""
        return self._core.replica

    @property
    def stages(self):
        """The stages this process runs."""
        return self._core.local_stages()

    @property
    def microbatches(self):
        return self._core.microbatches

    def state_dict(self):
        """The parameters and buffers of the chunks this process runs (in-process: the whole
        model), each named "c.name" with c the chunk's index in model order, so that any
        layout cutting the model into the same chunks loads it."""
        return checkpoint.model_state(self.chunks)

    def load_state_dict(self, state, strict=True):
        """Loads what `state` holds for this process's chunks, skipping the other chunks'
        entries. strict: a chunk of this process missing an entry of its own, or an entry of
        no chunk at all, raises KeyError; an entry of another shape or dtype, ValueError. Every
        entry is checked before any is loaded, so one that raises loads nothing. The copies of
        a tie (`tied`) all load the entry of the tie's first name that `state` holds. Returns
        torch's (missing_keys, unexpected_keys) of this process's chunks."""
        if not isinstance(state, Mapping):  # it failed on state.items(), naming nothing
            raise TypeError(f"load_state_dict: state must be a mapping of names to tensors (a "
                            f"state_dict()), got {type(state).__name__}")
        if not isinstance(strict, bool):  # "no" was taken as true
            raise TypeError(f"load_state_dict: strict must be True or False, got "
                            f"{type(strict).__name__} {strict!r}")
        with self._calls.hold("load_state_dict"):
            state = one_value_per_tie(self._ties, self.chunks, state, self._data.model)
            return checkpoint.load_model_state(self.chunks, self._core.chunks, state, strict)

    def save(self, path, optimizer=None, **extra):
        """Writes a checkpoint into the folder `path`: this process's chunks
        (part-RANK.TOKEN.pt), the optimizer's state named by parameter, and `extra` (the step,
        say), then manifest.json, the commit. Every process of a job calls it; with dp > 1
        replica 0 writes. Returns once the checkpoint is complete; a save that fails on any
        process (a full disk, a dead process, the manifest) raises on every one and leaves the
        folder's previous checkpoint whole."""
        with self._calls.hold("save"):
            _saving.save(self, path, optimizer, extra)

    def load(self, path, optimizer=None):
        """Loads a checkpoint that save() wrote on any layout cutting the model into the same
        chunks (other P, V, placement, threads or processes): this process's chunks and, given
        an optimizer over their parameters, its state. Returns the `extra` it was saved with.
        Training on from it is bitwise training on without the stop. Every process of a job
        calls it; one that cannot load (a missing folder, a missing entry) is told to every
        other, which raises too."""
        with self._calls.hold("load"):
            return _saving.load(self, path, optimizer)

    def _canonical(self):
        return self._ties.canonical if self._ties else {}

    def _refresh_ties(self, values=False):
        """The ties' copies as the chunks hold them now (a copy may have been replaced); with
        `values`, as a step starts, what the copies hold too (Ties.refresh)."""
        if self._ties is not None:
            self._ties.refresh(values)

    def clip_grad_norm_(self, max_norm, norm_type=2.0, error_if_nonfinite=False):
        """torch.nn.utils.clip_grad_norm_ over the whole model's parameters, wherever its chunks
        run: with a process per stage, the norm is the model's (gathered from every stage of
        the replica), not this process's part of it, and every process scales its gradients by
        the same factor. Every process of a job calls it, after step() and before the
        optimizer's step. Returns the total norm; the same bits as torch's function over the
        parameters of the chunks in model order."""
        with self._calls.hold("clip_grad_norm_"):
            self._refresh_ties()  # the norm counts a tie's first copy as it is now
            return clip_grad_norm(self, max_norm, norm_type, error_if_nonfinite)

    def step(self, inputs, targets=None):
        """Runs forward and backward of every microbatch through the pipeline.

        inputs, targets: a list of M microbatches (shapes may differ), or one batch each,
        split along dimension 0 into M; targets None: loss_fn(output, None), for a last chunk
        that computes its loss from what it was handed. Gradients are added to .grad in
        microbatch order, as a loop calling loss.backward() per microbatch would. Returns the
        sum of the microbatch losses, added in order (with a process per stage, every process
        of a replica gets it from the process that runs the last chunk).
        Raises StageError (the task's own exception chained; a task's SystemExit or
        KeyboardInterrupt as it is), TimeoutError
        (no progress for `timeout`), or KeyboardInterrupt; then no .grad has changed (but for a
        Ctrl-C while .grad is written, raised once all is: the step completed). A batch
        given whole must split evenly into M microbatches, inputs and targets alike. A step
        called while another of this pipeline runs (from another thread, or from a task's
        own code) raises RuntimeError at once, and so do eval_step, load, load_state_dict,
        save and clip_grad_norm_; so does a step while another pipeline's step trains one of
        the same parameters (two pipelines over the same modules).
        """
        with self._calls.hold("step"):  # under no_grad: refused on every process (run_pass)
            return self._run_step(inputs, targets)

    def eval_step(self, inputs, targets=None):
        """Runs every microbatch's forward through the pipeline without gradients, as a plain
        loop under torch.no_grad() would; no .grad changes, and module.eval() (dropout, batch
        norm) is the caller's to set, as with a plain model. The schedule's backward tasks
        still run, doing nothing.

        inputs, targets: as for step(); targets may be None (no loss). Returns (outputs, loss):
        outputs are the last chunk's outputs in microbatch order, concatenated along dimension
        0 when inputs came as one batch and they are tensors of at least one dimension that
        agree in every other dimension, dtype and device, else a list, on the processes that
        run the last stage (None on the others); loss is the sum of the microbatch losses with
        targets where they are 0-dim, or where they have a dimension (a loss per sample) their
        concatenation along dimension 0 (on every process of the replica), else None. Raises
        as step() does.
        """
        with self._calls.hold("eval_step"):
            self._data.eval = True
            try:
                # Its set-up (the ties' copies as the chunks hold them) fails as step()'s does:
                # on every process at once (run_pass).
                rec, loss, _ = run_pass(self, inputs, targets, False, self._set_up_eval)
                outputs = self._data.outputs
            finally:
                self._data.eval = False
                self._data.outputs = {}
            if self._dp > 1:  # a module in training mode updates its statistics here too
                # (the replicas' buffers agree: run_pass refused the step on every process else)
                settle_buffers(self)
            self.last_step = StepRecord(rec)
            total = replica_loss(self._core, loss) if targets is not None else None
            if not outputs:
                return None, total
            return eval_outputs(outputs, inputs, self._core.microbatches), total

    def _run_step(self, inputs, targets):
        ties = self._ties
        # The set-up runs inside run_pass, where a failure here (memory running out in
        # GradSums' copy of each .grad, say) rides on the step's first gather and every other
        # process raises at once, naming this one; raised before it, the others waited in that
        # gather until their timeout.
        try:
            return self._train_pass(inputs, targets, ties)
        finally:
            release_parameters(self)  # claimed by _set_up_step, held to the last .grad write

    def _train_pass(self, inputs, targets, ties):
        try:
            rec, loss, (sums, layout) = run_pass(self, inputs, targets, True, self._set_up_step)
        finally:
            self._data.sums = None  # a copy of every gradient: not kept past a failed step
            self._data.known = None  # nor the model's tensors of the step (a cache replaced)
        pairs = sums.pairs()
        warn_inexact(sums, self.chunks, self._inexact_said)
        if ties is not None:  # every holder of a tie gets the tie's sum
            pairs = ties.sum(pairs, add_previous=self._dp == 1)
        if self._dp > 1:  # every replica joins, training something or not
            pairs = sum_over_replicas(self._core, self._dp, pairs, layout)
            # Buffers the forwards updated (running statistics): replica 0's. Checked over the
            # job in run_pass, so nothing here refuses them; copied before any .grad is written
            # all the same, so that .grad is the last thing a step changes.
            settle_buffers(self)
        write_grads(self._data, pairs)  # after the job's collectives
        warn_held_leaves(self)
        self.last_step = StepRecord(rec)
        return replica_loss(self._core, loss)

    def _set_up_step(self):
        """(GradSums, trained_layout's mark or None) for a step (run_pass runs it)."""
        return set_up_step(self)

    def _set_up_eval(self):
        """eval_step's set-up: the ties' copies as the chunks hold them (run_pass runs it)."""
        check_state_kept(self._ordered_arg, self.chunks, self._core, self._data.loss_fn)
        self._refresh_ties(values=True)
        return None, None

