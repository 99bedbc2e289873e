"""Batches of sparse and other non-strided tensors: given as a list of microbatches, a first
chunk takes them as they are, with a process per stage too (each process digests its batch to
check that the processes of a replica were given the same one, and NumPy reads no sparse
tensor: the step failed in every process); one sparse tensor for the whole batch, which
torch.tensor_split cannot split, is refused naming the list to give instead."""
import os
import subprocess
import sys
import warnings

import pytest
import torch
from torch import nn

import ports
import rrfp
from rrfp._batch import digest

D = 8


class SparseIn(nn.Module):
    """A first chunk that takes a sparse microbatch (a graph's adjacency, bag-of-words rows)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(D, D))

    def forward(self, x):
        return torch.sparse.mm(x, self.w)


def sparse_rows(rows, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(rows, D, generator=g) > 0.7).float().to_sparse()


def one(x):
    return digest([x], [[x]])


def nested(*parts):
    with warnings.catch_warnings():  # the prototype's warning
        warnings.simplefilter("ignore")
        return torch.nested.nested_tensor(list(parts))


def compressed(x, layout):
    with warnings.catch_warnings():  # "support is in beta"
        warnings.simplefilter("ignore")
        return {"csr": x.to_sparse_csr, "csc": x.to_sparse_csc,
                "bsr": lambda: x.to_sparse_bsr((2, 2)),
                "bsc": lambda: x.to_sparse_bsc((2, 2))}[layout]()


@pytest.mark.parametrize("layout", ["coo", "csr", "csc", "bsr", "bsc", "mkldnn", "nested",
                                    "quantized", "conj", "bfloat16"])
def test_the_digest_reads_tensors_of_every_kind_by_what_they_hold(layout):
    # Each failed in NumPy (or in .shape, for a nested tensor) before the step ran.
    def make(scale):
        x = torch.arange(16, dtype=torch.float32).reshape(4, 4) % 3 * scale
        if layout == "coo":
            return x.to_sparse()
        if layout in ("csr", "csc", "bsr", "bsc"):
            return compressed(x, layout)
        if layout == "mkldnn":
            return x.to_mkldnn()
        if layout == "nested":
            return nested(x[0], x[1, :3])
        if layout == "quantized":
            return torch.quantize_per_tensor(x, 0.5, 0, torch.qint8)
        if layout == "conj":
            return torch.complex(x, x).conj()
        return x.bfloat16()
    assert one(make(1.0)) == one(make(1.0))
    assert one(make(1.0)) != one(make(2.0))  # other values
    dense = torch.arange(16, dtype=torch.float32).reshape(4, 4) % 3
    if layout not in ("conj", "bfloat16", "quantized"):
        assert one(make(1.0)) != one(dense)  # the same values in another layout


def test_the_digest_of_a_sparse_tensor_is_its_values_whether_coalesced_or_not():
    i, v = torch.tensor([[0, 0, 1], [1, 1, 2]]), torch.tensor([1.0, 2.0, 3.0])
    raw = torch.sparse_coo_tensor(i, v, (2, 3))
    assert not raw.is_coalesced()
    assert one(raw) == one(raw.coalesce())
    assert one(raw) != one(torch.sparse_coo_tensor(i, v * 2, (2, 3)))
    assert one(raw) != one(torch.sparse_coo_tensor(i, v, (2, 4)))  # another shape
    # A conjugate view and its values: the same tensor (NumPy took neither the view...).
    c = torch.complex(v, v)
    assert one(c.conj()) == one(c.conj().resolve_conj())


@pytest.mark.parametrize("kind", ["coo", "csr", "nested"])
def test_one_whole_non_strided_batch_is_refused_naming_the_list(kind):
    # torch.tensor_split failed inside with c10's NotImplementedError and its C++ stack.
    pipe = rrfp.Pipeline([SparseIn(), nn.Linear(D, 3)], lambda o, y: o.sum(), pp=2,
                         microbatches=4, timeout=60)
    x = {"coo": lambda: sparse_rows(8, 1), "csr": lambda: compressed(sparse_rows(8, 1)
                                                                    .to_dense(), "csr"),
         "nested": lambda: nested(*[torch.randn(D) for _ in range(8)])}[kind]()
    name = "nested" if kind == "nested" else str(x.layout)
    for call in (pipe.step, lambda b: pipe.eval_step(b)):
        with pytest.raises(TypeError, match=f"inputs: a {name} tensor cannot be split into 4 "
                                            "microbatches .*give a list of 4 microbatches"):
            call(x)
    # With targets of another row count (a nested tensor's 8 components are no rows): the
    # same refusal, not "8 and 4 rows", which sent the caller to mend a count first.
    with pytest.raises(TypeError, match=f"inputs: a {name} tensor cannot be split"):
        pipe.step(x, torch.randn(4, 3))
    with pytest.raises(TypeError, match="targets: a torch.sparse_coo tensor cannot be split"):
        pipe.step([sparse_rows(2, s) for s in range(4)], sparse_rows(8, 1))
    assert pipe.chunks[0].w.grad is None


# Two processes of one replica, each stage its own (torch.distributed's environment by hand, as
# torchrun sets it): sparse microbatches into the first chunk, through step() and eval_step(),
# as a plain loop over the same chunks; then different sparse batches, refused in both.
_TWO_STAGES = """
import os, torch, rrfp
from torch import nn
import test_sparse_batches as t
torch.manual_seed(0)
ref = [t.SparseIn(), nn.Linear(t.D, 3)]
torch.manual_seed(0)
chunks = [t.SparseIn(), nn.Linear(t.D, 3)]
loss = lambda o, y: nn.functional.cross_entropy(o, y)
xs = [t.sparse_rows(2, s) for s in range(4)]
ys = [torch.tensor([s % 3, (s + 1) % 3]) for s in range(4)]
pipe = rrfp.Pipeline(chunks, loss, pp=2, microbatches=4, timeout=60)
want = None
for x, y in zip(xs, ys):
    l = loss(ref[1](ref[0](x)), y)
    l.backward()
    want = l.detach() if want is None else want + l.detach()
assert torch.equal(pipe.step(xs, ys), want)
for c, m in pipe.chunks.items():
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(m.parameters(), ref[c].parameters()))
assert torch.equal(pipe.eval_step(xs, ys)[1], want)
mine = [t.sparse_rows(2, 100 * int(os.environ["RANK"]) + s) for s in range(4)]
for name, call in (("step()", lambda: pipe.step(mine, ys)),
                   ("eval_step()", lambda: pipe.eval_step(mine, ys))):
    try:
        call()
    except ValueError as e:
        assert f"passed different inputs to {name}" in str(e), e
    else:
        raise AssertionError("different sparse batches were taken")
print("sparse batches ok", flush=True)
"""


def test_sparse_microbatches_into_the_first_chunk_with_a_process_per_stage():
    port = ports.free_port()
    here = os.path.dirname(os.path.abspath(__file__))
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1",
                   PYTHONPATH=os.pathsep.join(os.path.abspath(p) for p in sys.path if p))
        env.pop("TORCHELASTIC_RUN_ID", None)
        procs.append(subprocess.Popen([sys.executable, "-c", _TWO_STAGES], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=here))
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0 and "sparse batches ok" in out, err[-3000:]
