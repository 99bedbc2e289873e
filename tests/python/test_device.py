"""Pipeline's `device`: what is refused, and that a pipeline on a device trains bitwise as a
plain loop on that device does: in every schedule and split backward, with tied weights, for
evaluation too, and with seeded dropout and batch norm statistics. The CUDA tests skip, saying so, where torch sees no GPU (CI); they run on a
GPU machine (scripts/gpu-check.sh)."""
import os

# Deterministic cuBLAS needs its workspace fixed before CUDA starts (torch's reproducibility
# notes); harmless without a GPU.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import pytest  # noqa: E402
import torch  # noqa: E402

import lm  # noqa: E402
import rrfp  # noqa: E402
from rrfp._device import parse_device  # noqa: E402
from test_tied import delays, tied_gpt, unique_params, VOCAB  # noqa: E402

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA device: torch.cuda.is_available() "
                                                 "is False (the GPU half runs on a GPU machine)")
CASES = [  # (hint, policy, split, vpp)
    ("1f1b", "fixed", "off", 1),
    ("bf", "ready", "off", 1),
    ("bfw", "ready", "on", 1),
    ("zb-h1", "fixed", "auto", 1),
    ("bf", "ready", "off", 2),
]


@pytest.mark.parametrize("device,error,words", [
    ("tpu", ValueError, "'tpu' is not a device"),
    ("nonsense", ValueError, "is not a device"),
    (3.5, ValueError, "is not a device"),
    ("meta", ValueError, "'meta' is not supported"),
])
def test_what_is_not_a_device_is_refused(device, error, words):
    with pytest.raises(error, match=words):
        rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, microbatches=2, device=device)


@pytest.mark.skipif(CUDA, reason="this machine has CUDA: the refusal needs one without")
def test_cuda_without_a_gpu_is_a_runtime_error():
    with pytest.raises(RuntimeError, match="sees no CUDA device"):
        rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, microbatches=2, device="cuda")


def train(chunks, steps, m, step_fn):
    opt = torch.optim.SGD(unique_params(chunks), lr=0.05)
    losses = []
    for s in range(steps):
        xs, ys = lm.batches(m, seed=s, vocab=VOCAB)
        opt.zero_grad()
        losses.append(step_fn(xs, ys).to("cpu"))
        opt.step()
    return losses


def reference(build, n, steps, m, device):
    """The plain loop on `device`: chunks moved there, each microbatch too."""
    chunks = [c.to(device) for c in build(n)]
    move = lambda xs: [x.to(device) for x in xs]  # noqa: E731
    losses = train(chunks, steps, m,
                   lambda xs, ys: lm.reference_step(chunks, move(xs), move(ys)))
    return chunks, losses


def check_bitwise(build, device, hint, policy, split, vpp):
    pp, m, steps = 2 if vpp == 2 else 4, 4, 3
    n = pp * vpp
    ref, ref_losses = reference(build, n, steps, m, device)
    chunks = build(n)  # on the CPU: the pipeline moves them
    pipe = rrfp.Pipeline(chunks, lm.loss_fn, pp=pp, vpp=vpp, microbatches=m, hint=hint,
                         policy=policy, split_backward=split, delay_fn=delays(7), device=device)
    losses = train(chunks, steps, m, pipe.step)
    # The device as the pipeline places it: "cuda" is this process's GPU, cuda:N (a
    # torch.device("cuda") equals no parameter's device, whose index is always set).
    want = parse_device(device)
    for c in pipe.chunks.values():
        assert all(p.device == want for p in c.parameters())
    assert [float(x) for x in losses] == [float(x) for x in ref_losses]
    for i, (a, b) in enumerate(zip(ref, chunks)):
        for (name, p), q in zip(a.named_parameters(), b.parameters()):
            assert torch.equal(p, q), f"chunk {i} {name} differs"
    return pipe, ref


@pytest.mark.parametrize("hint,policy,split,vpp", CASES)
def test_cpu_device_trains_as_the_plain_loop(hint, policy, split, vpp):
    check_bitwise(lambda n: lm.chunks(n, seed=3), "cpu", hint, policy, split, vpp)


@pytest.fixture
def deterministic():
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(was)


@needs_cuda
@pytest.mark.parametrize("hint,policy,split,vpp", CASES)
def test_cuda_trains_as_the_plain_loop_on_the_gpu(deterministic, hint, policy, split, vpp):
    check_bitwise(lambda n: lm.chunks(n, seed=3), "cuda", hint, policy, split, vpp)


@needs_cuda
@pytest.mark.parametrize("hint,policy,split", [("bf", "ready", "off"), ("bfw", "ready", "on")])
def test_cuda_tied_weights_across_stage_streams(deterministic, hint, policy, split):
    # The tied embedding's gradient adds the last stage's and the first stage's, made on two
    # streams: each must have completed before the other reads it.
    check_bitwise(tied_gpt, "cuda", hint, policy, split, 1)


@needs_cuda
def test_cuda_eval_step_outputs_on_the_gpu(deterministic):
    pipe, ref = check_bitwise(lambda n: lm.chunks(n, seed=3), "cuda", "bf", "ready", "off", 1)
    xs, ys = lm.batches(4, seed=9, vocab=VOCAB)
    outs, loss = pipe.eval_step(xs, ys)
    with torch.no_grad():
        want = []
        for x in xs:
            h = x.to("cuda")
            for c in ref:
                h = c(h)
            want.append(h)
    assert all(o.is_cuda and torch.equal(o, w) for o, w in zip(outs, want))
    assert loss.is_cuda


def stateful_chunks(n):
    """Chunks with dropout and batch norm: random numbers and running statistics."""
    torch.manual_seed(4)
    return [torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8),
                                torch.nn.Dropout(0.3)) for _ in range(n)]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_cuda)])
@pytest.mark.parametrize("hint", ["bf", "adaptive"])
def test_seeded_dropout_and_statistics_on_the_device(deterministic, device, hint):
    g = torch.Generator().manual_seed(5)
    sizes = [3, 6, 2, 5]
    xs = [torch.randn(k, 8, generator=g) for k in sizes]
    ys = [torch.randn(k, 8, generator=g) for k in sizes]
    mse = lambda y, t: ((y - t) ** 2).mean()  # noqa: E731
    ref = [c.to(device) for c in stateful_chunks(4)]
    for mb, (x, y) in enumerate(zip(xs, ys)):
        h = x.to(device)
        for c, chunk in enumerate(ref):
            torch.manual_seed(rrfp.task_seed(11, 0, c, mb))
            h = chunk(h)
        mse(h, y.to(device)).backward()
    chunks = stateful_chunks(4)
    pipe = rrfp.Pipeline(chunks, mse, pp=4, microbatches=4, hint=hint, seed=11,
                         delay_fn=delays(3), device=device)
    assert pipe.ordered_forwards
    pipe.step(xs, ys)
    for a, b in zip(ref, chunks):
        for p, q in zip(a.parameters(), b.parameters()):
            assert torch.equal(p.grad, q.grad)
        for p, q in zip(a.buffers(), b.buffers()):
            assert torch.equal(p, q)


def test_inputs_move_to_the_device_wherever_their_tensors_sit():
    # "meta" stands in for a GPU here: a move there is visible without one.
    from rrfp._device import to_device
    from test_pytree import Carry, Hidden, Output
    x = Output(hidden=Hidden(torch.ones(2), torch.ones(2) > 0, Carry(torch.zeros(3))), n=4)
    moved = to_device((x, [torch.ones(1)], {"k": "text"}), torch.device("meta"))
    got = moved[0]["hidden"]
    assert type(moved[0]) is Output and moved[0]["n"] == 4 and moved[2] == {"k": "text"}
    assert all(t.device.type == "meta" for t in (got.h, got.mask, got.carry.t, moved[1][0]))
    assert x["hidden"].h.device.type == "cpu"  # the caller's objects are left as they were


def test_cuda_under_a_launcher_names_this_processs_gpu(monkeypatch):
    # torch's current device stays 0 in every process unless the script sets it: "cuda" then
    # takes the local rank's GPU, where every process of a node used to take GPU 0.
    from rrfp import _device
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    current = [0]
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current[0])
    for key in ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"):
        monkeypatch.delenv("LOCAL_RANK", raising=False)
        monkeypatch.delenv("OMPI_COMM_WORLD_LOCAL_RANK", raising=False)
        assert _device.parse_device("cuda") == torch.device("cuda", 0)  # no launcher
        monkeypatch.setenv(key, "6")
        assert _device.parse_device("cuda") == torch.device("cuda", 2)  # 6 mod 4
        assert _device.parse_device("cuda:1") == torch.device("cuda", 1)  # named: as named
        current[0] = 3  # the script chose its device: that one
        assert _device.parse_device("cuda") == torch.device("cuda", 3)
        current[0] = 0



def test_cuda_under_a_launcher_does_not_start_cuda_on_gpu_0(monkeypatch):
    # Asking torch for the current device starts CUDA there: a context on GPU 0 in every
    # process of the node. Before CUDA has started, the local rank decides alone.
    from rrfp import _device
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)

    def starts_cuda():
        raise AssertionError("current_device() asked before CUDA started")
    monkeypatch.setattr(torch.cuda, "current_device", starts_cuda)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert _device.parse_device("cuda") == torch.device("cuda", 3)
