"""Where a stage's tasks run: Pipeline's `device`.

On a GPU each stage gets a CUDA stream of its own, so that two stages of one process run their
kernels side by side rather than one after the other on the device's default stream. A task
counts as done, for the runtime's arbiter and for the gradient sums, only when an event
recorded after its kernels has completed: readiness is the GPU's, not the moment the host
finished enqueueing. Between stages of one process a payload is a copy of the producer's
tensor in device memory, made on the producer's stream before the task counts as done (so the
consumer's stream need not wait for it); across processes it goes through host memory (the
job's messages are bytes) and arrives on the consumer's stream by its own copy.
"""
import contextlib

import torch
from torch.utils import _pytree as pytree

from . import _rrfp
from ._tree import pack, unpack


def parse_device(device):
    """None (each chunk runs where its parameters are), or the torch.device `device` names.
    Raises ValueError for what is not a device rrfp runs on, RuntimeError for CUDA without
    one."""
    if device is None:
        return None
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device: {device!r} is not a device (\"cpu\", \"cuda\", \"cuda:N\" "
                         f"or a torch.device)") from e
    if d.type == "cpu":
        return d
    if d.type != "cuda":
        raise ValueError(f"device: {d.type!r} is not supported (\"cpu\" or \"cuda\")")
    if not torch.cuda.is_available():
        raise RuntimeError(f"device: {str(d)!r} asked for, but torch {torch.__version__} sees "
                           f"no CUDA device (torch.cuda.is_available() is False)")
    count = torch.cuda.device_count()
    if d.index is None:
        return torch.device("cuda", _this_process_gpu(count))
    if d.index >= count:
        raise ValueError(f"device: cuda:{d.index} does not exist (this machine has {count} "
                         f"CUDA device{'s' if count != 1 else ''}: 0 to {count - 1})")
    return d


def _this_process_gpu(count):
    """The GPU "cuda" names: the current device, or under a launcher that numbers the
    processes of a node (torchrun's LOCAL_RANK, Open MPI's OMPI_COMM_WORLD_LOCAL_RANK) while the
    current device is still torch's default 0, this process's own: local rank mod the count.
    Otherwise every process of a node would have run its stage on GPU 0. Where CUDA has not
    started yet, the current device is not asked for: asking starts CUDA on GPU 0, a context
    there in every process."""
    import os
    from ._launch import env_int
    # Read as the launchers' other variables are: LOCAL_RANK=" 3" was skipped (every process
    # on GPU 0), garbage refused naming the variable.
    local = next((env_int(os.environ, k, "a local rank (a whole number)", "the launcher")
                  for k in ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK") if k in os.environ),
                 None)
    if local is not None and (not torch.cuda.is_initialized() or
                              torch.cuda.current_device() == 0):
        return local % count
    return torch.cuda.current_device()


def to_device(obj, device):
    """obj with its tensors on `device` (None: as it is), wherever they sit: through tuples,
    lists and dicts, and inside dataclasses and other picklable objects, as they travel
    between chunks (rrfp/_tree.py)."""
    if device is None:
        return obj
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    try:
        structure, tensors = pack(obj, "inputs", plain_only=False)
    except TypeError:  # not picklable: what pytree opens
        return pytree.tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, obj)
    return unpack(structure, [t.to(device) for t in tensors])


def module_device(modules):
    """The device of the first parameter or buffer of `modules` (None: they hold neither)."""
    for m in modules:
        for t in m.parameters():
            return t.device
        for t in m.buffers():
            return t.device
    return None


class StageDevice:
    """One stage's device and, on a GPU, its stream (see the module's docstring)."""

    def __init__(self, device, held=True):
        self.device = device
        cuda = device is not None and device.type == "cuda"
        self.stream = torch.cuda.Stream(device=device) if cuda else None
        self.held = held  # messages hold tensors (stages of one process), else bytes

    def scope(self):
        """The context a task of this stage runs in: its stream current on a GPU."""
        if self.stream is None:
            return contextlib.nullcontext()
        return torch.cuda.stream(self.stream)

    def adopt(self, received):
        """Called as a task starts with what it received: a tensor, (structure, tensors) or
        None. A tensor another stage's stream allocated is used on this stage's stream (or,
        without one, the current stream) now: torch's caching allocator is told
        (record_stream), or, should this stage hold the last reference, it would hand the
        memory to the other stream while this stream's kernels still read it (a W task reads
        its forward's input after the producer has let go of its copy)."""
        if received is None or not torch.cuda.is_initialized():
            return  # no tensor can be on a GPU
        for t in received[1] if isinstance(received, tuple) else (received,):
            if t.is_cuda:
                stream = self.stream
                if stream is None or stream.device != t.device:
                    stream = torch.cuda.current_stream(t.device)
                t.record_stream(stream)

    def hand_off(self, out):
        """What a task sends (a tensor, (structure, tensors) or None), its tensors on a GPU
        copied on the current stream: the stage's, inside scope(). A message between stages of
        one process holds tensors, not bytes, and the consumer must not see the producer's
        memory: a producer may write its next output into the same memory (a static buffer, a
        CUDA graph's output), and a hook that changes a received gradient in place would change
        the producer's tensors. The C++ side copies tensors on the CPU (held_payload.hpp).
        Without a stream of its own the stage waits here for the copies, which the next
        stage's stream would not wait for."""
        if out is None or not self.held or not torch.cuda.is_initialized():
            return out  # across processes the message is bytes: the encoding copies
        structure, tensors = out if isinstance(out, tuple) else (None, [out])
        # A sparse tensor has no copy of this kind: the C++ side refuses it, naming the task.
        copies = [_rrfp._message_copy(t) if t.is_cuda and t.layout == torch.strided else t
                  for t in tensors]
        if self.stream is None:
            for d in {t.device for t in copies if t.is_cuda}:
                torch.cuda.current_stream(d).synchronize()
        return copies[0] if structure is None else (structure, copies)

    def follow(self):
        """Called on the caller's thread as a step starts: the stage's stream waits for what the
        caller's stream holds so far (the optimizer's update of the parameters, say), on the
        GPU, without blocking the host."""
        if self.stream is not None:
            self.stream.wait_stream(torch.cuda.current_stream(self.device))

    def settle(self):
        """Returns once every kernel this stage has enqueued so far has completed. The thread
        waits in the driver with the GIL released, so the other stages' threads go on."""
        if self.stream is not None:
            done = torch.cuda.Event()
            done.record(self.stream)
            done.synchronize()
