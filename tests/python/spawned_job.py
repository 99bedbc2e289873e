"""Two processes started without a launcher, as torch.multiprocessing.spawn's examples start
them: each makes the default group itself (init_method and rank given, no environment). A
pipeline there takes the group (transport c10d, a stage a process): it ran the whole pipeline
in threads in each, two trainings where one was meant, racing on one checkpoint folder. A
worker forked from either afterwards (a DataLoader's, a Pool's) holds its parent's group: a
pipeline over the job's processes is refused there at once (under torchrun it waited for
peers that never come), and an in-process one trains.
Usage: python spawned_job.py RENDEZVOUS_FILE"""
import multiprocessing
import sys

import torch
import torch.distributed as dist

import conftest  # noqa: F401  (the package path)
import rrfp


def loss_fn(out, target):
    return (out - target).square().sum()


def chunks():
    torch.manual_seed(0)
    return [torch.nn.Linear(4, 4) for _ in range(2)]


def in_worker(transport):
    try:
        pipe = rrfp.Pipeline(chunks(), loss_fn, pp=2, microbatches=2, transport=transport)
        pipe.step(torch.ones(4, 4), torch.zeros(4, 4))
        return "stepped"
    except ValueError as e:
        return str(e)


def process(rank, path):
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=2)
    with multiprocessing.get_context("fork").Pool(1) as pool:
        said = pool.apply_async(in_worker, (None,)).get(timeout=30)
        assert said.startswith("transport: this process was forked from one whose "
                               "torch.distributed default group it inherited"), said
        assert pool.apply_async(in_worker, ("inproc",)).get(timeout=30) == "stepped"
    pipe = rrfp.Pipeline(chunks(), loss_fn, pp=2, microbatches=2, timeout=30)
    assert pipe.stages == [rank], pipe.stages  # a stage a process, not both in threads
    pipe.step(torch.ones(4, 4), torch.zeros(4, 4))
    del pipe
    dist.destroy_process_group()
    print(f"rank {rank}: one stage of the job; a forked worker refused, in threads it trains",
          flush=True)


if __name__ == "__main__":
    torch.multiprocessing.spawn(process, args=(sys.argv[1],), nprocs=2, join=True)
