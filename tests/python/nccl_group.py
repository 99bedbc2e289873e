"""rrfp.Pipeline under torchrun when the job's default group is NCCL, as a GPU job makes it:
the pipeline talks over Gloo groups of the same ranks (NCCL carries CUDA tensors alone, and the
pipeline's messages are host bytes) and trains as a plain loop does on the GPU. Run by
scripts/gpu-check.sh on the GPU machine (one GPU: one process, P=1; NCCL refuses two ranks on
one GPU); --backend gloo runs the same on the CPU.
    python3 -m torch.distributed.run --nproc_per_node 1 --redirects 1 --tee 1 \\
        tests/python/nccl_group.py [--backend gloo]
"""
import copy
import os
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before CUDA starts: bitwise GEMMs
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import rrfp  # noqa: E402

backend = sys.argv[sys.argv.index("--backend") + 1] if "--backend" in sys.argv else "nccl"
if backend == "nccl" and not torch.cuda.is_available():
    sys.exit("nccl_group.py: no CUDA device; pass --backend gloo to run on the CPU")
device = "cuda" if backend == "nccl" else "cpu"
torch.use_deterministic_algorithms(True)
dist.init_process_group(backend)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
ref = copy.deepcopy(model).to(device)
loss_fn = lambda y, t: ((y - t) ** 2).sum()  # noqa: E731
pipe = rrfp.Pipeline([model], loss_fn, pp=1, microbatches=4, device=device)
x, t = torch.randn(8, 8), torch.randn(8, 4)
loss = pipe.step(x, t)
want = None
for xm, tm in zip(x.to(device).chunk(4), t.to(device).chunk(4)):
    part = loss_fn(ref(xm), tm)
    part.backward()
    want = part.detach() if want is None else want + part.detach()
assert torch.equal(loss.to(device), want), (loss, want)
for p, q in zip(model.parameters(), ref.parameters()):
    assert torch.equal(p.grad, q.grad), "a gradient differs"
assert dist.get_backend() == backend  # the caller's group is left as it was
print(f"nccl_group.py: a {backend} default group, the pipeline over Gloo, bitwise the plain "
      "loop's", flush=True)
dist.destroy_process_group()
