"""The step's data: what a Pipeline shares with its stages' runners (rrfp._stage) for one
step, and what they report back (the first error under a lock, the losses, the outputs)."""
import threading
import weakref

from ._leaves import MadeGrads


class StepData:
    """The step's microbatches, targets and loss function, and what the stages report back."""

    def __init__(self, loss_fn, delay_fn):
        self.loss_fn = loss_fn
        self.delay_fn = delay_fn
        self.seeding = None  # rrfp._seed.Seeding (seed=), or None: tasks draw as they run
        self.seed_step = 0  # the step of the seeds: steps and evaluation steps run so far
        self.caller = None  # the caller's thread-local settings (rrfp._caller), or None
        self.inputs = []
        self.targets = []
        self.losses = {}
        self.gradless = 0  # this step's microbatches whose loss wants no gradient
        self.total = None  # their sum, once the step has completed (rrfp._step.closing)
        self.sums = None  # GradSums of the step
        self._scaler = None  # a weak reference to the rrfp.GradScaler (the scaler property)
        self.chunks = {}  # every chunk of this process by index: names parameters in messages
        # Every chunk the Pipeline was given by index where it was given a list (other
        # processes' too; None: `chunks`, built by a chunk_fn), and loss_fn: the owners of the
        # tensors a chunk may not use for a gradient (rrfp._graph.foreign_leaves): known,
        # rrfp._graph.ModelTensors, taken as each step is set up, before its forwards.
        self.model = None
        self.known = None
        self.made = MadeGrads()  # the gradients of leaves a forward made, by microbatch
        # The step's stateful modules (rrfp._order.check_state_kept: {id: (module, users)}), or
        # None where ordered_forwards=False left them unfound: what StateWatch watches.
        self.stateful = None
        # An evaluation step (Pipeline.eval_step): forwards under no_grad, the last chunk's
        # outputs kept by microbatch, and backward tasks that do nothing.
        self.eval = False
        self.outputs = {}
        self._lock = threading.Lock()
        # (stage, task, exception) of each task that raised, in the order they did: the step's
        # error names the one the runtime saw first, which need not be the first recorded here.
        self.errors = []

    @property
    def scaler(self):
        """The rrfp.GradScaler whose scale multiplies each loss before the backward, or None.
        Held weakly: a scaler let go of scales no more (its pipeline kept it, and with it every
        later loss's scale, with no way to stop)."""
        return None if self._scaler is None else self._scaler()

    @scaler.setter
    def scaler(self, scaler):
        self._scaler = None if scaler is None else weakref.ref(scaler)

    def record(self, stage, task, exc):
        with self._lock:
            self.errors.append((stage, task, exc))

    def error_named_by(self, message):
        """The exception of the task `message` (the step's StageError) names, else the first
        recorded; None where no task raised."""
        with self._lock:
            for stage, task, exc in self.errors:
                if stage is not None and message.startswith(f"stage {stage}: task {task} failed"):
                    return exc
            return self.errors[0][2] if self.errors else None
