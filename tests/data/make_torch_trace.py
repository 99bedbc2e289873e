"""Writes tests/data/torch-pp2/rank{0,1}.json.gz: PyTorch profiler traces of a real two-stage
1F1B pipeline (2 processes, Gloo, 4 microbatches of a small MLP), labelled the way docs/twin.md
asks: record_function("PP:<stage>F<mb>"), "PP:<stage>B<mb>" and the receives
"PP:<stage>RECV_F<mb>" / "PP:<stage>RECV_B<mb>". Steps are ProfilerStep#N: the schedule's
two active steps, which torch 1.13 names ProfilerStep#1 and #2. Run with Debian's python3 (it has torch): /usr/bin/python3 tests/data/make_torch_trace.py
"""
import gzip
import os
import shutil
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, record_function, schedule

P, M, WIDTH, BATCH = 2, 4, 384, 64
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch-pp2")


def one_f_one_b(stage):
    warmup = min(M, P - stage - 1)
    order = [("F", mb) for mb in range(warmup)]
    f, b = warmup, 0
    while b < M:
        if f < M:
            order.append(("F", f))
            f += 1
        order.append(("B", b))
        b += 1
    return order


def worker(rank):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29533"
    dist.init_process_group("gloo", rank=rank, world_size=P)
    torch.manual_seed(rank)
    torch.set_num_threads(1)
    # The last stage does more (a head): stages are uneven, as in real pipelines.
    layers = 2 if rank == 0 else 3
    model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(layers)])
    data = [torch.randn(BATCH, WIDTH) for _ in range(M)]

    def step():
        acts, outs, sends = {}, {}, []
        for kind, mb in one_f_one_b(rank):
            if kind == "F":
                if rank == 0:
                    x = data[mb]
                else:
                    x = torch.empty(BATCH, WIDTH)
                    with record_function(f"PP:{rank}RECV_F{mb}"):
                        dist.recv(x, rank - 1)
                    x.requires_grad_()
                with record_function(f"PP:{rank}F{mb}"):
                    y = model(x)
                acts[mb], outs[mb] = x, y
                if rank < P - 1:
                    sends.append(dist.isend(y.detach(), rank + 1))
            else:
                if rank == P - 1:
                    grad = None
                else:
                    grad = torch.empty(BATCH, WIDTH)
                    with record_function(f"PP:{rank}RECV_B{mb}"):
                        dist.recv(grad, rank + 1)
                with record_function(f"PP:{rank}B{mb}"):
                    if grad is None:
                        outs[mb].square().mean().backward()
                    else:
                        outs[mb].backward(grad)
                if rank > 0:
                    sends.append(dist.isend(acts[mb].grad, rank - 1))
        for s in sends:
            s.wait()

    path = os.path.join(OUT, f"rank{rank}.json")
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=1, warmup=1, active=2),
                 on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for _ in range(4):
            dist.barrier()
            step()
            prof.step()
    # Keep only what the fixture needs (step spans and labels): the operator events are most
    # of the file and the importer skips them anyway.
    import json
    events = json.load(open(path))
    keep = [e for e in events if e.get("name", "").startswith(("PP:", "ProfilerStep#"))]
    with gzip.open(path + ".gz", "wt") as f:
        json.dump(keep, f)
    os.remove(path)
    dist.destroy_process_group()


if __name__ == "__main__":
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    mp.spawn(worker, nprocs=P)
    print("wrote", OUT, file=sys.stderr)
