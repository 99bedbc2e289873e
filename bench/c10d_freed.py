"""What c10d Pipelines built and freed one after another leave in each process: its threads and
open descriptors after 1, 2, 10, 50, 100, 200... pipelines (one step each, pp = the number of
processes), and with --nofile N, under a descriptor limit of N, how many it builds and frees
before one fails. Under torchrun, or alone (one process, a group of one):

    bash tests/python/torchrun.sh /usr/bin/python3 2 bench/c10d_freed.py 200 [--nofile 200]
    PYTHONPATH=build/python /usr/bin/python3 bench/c10d_freed.py 100
"""
import argparse
import atexit
import gc
import os
import resource
import shutil
import tempfile

import torch
import torch.distributed as dist

import rrfp
from bench_args import setting_line


def held():
    return len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd"))


def remove(folder, limits):
    """Removes the rendezvous folder of a run alone. The descriptor limit goes back first: a run
    that --nofile ran out of descriptors could not open the folder to empty it."""
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, limits)
    except (ValueError, OSError):
        pass
    shutil.rmtree(folder, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pipelines", type=int, help="how many to build and free (1 to 100000)")
    ap.add_argument("--nofile", type=int, default=0, help="the descriptor limit (0: as it is)")
    a = ap.parse_args()
    if not 1 <= a.pipelines <= 100000:
        ap.error(f"pipelines: {a.pipelines} is not between 1 and 100000")
    if "RANK" in os.environ:
        dist.init_process_group("gloo")
    else:
        # Removed at exit, on an error too: every run alone left its folder in /tmp.
        folder = tempfile.mkdtemp()
        atexit.register(remove, folder, resource.getrlimit(resource.RLIMIT_NOFILE))
        rendezvous = os.path.join(folder, "rendezvous")
        dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=0, world_size=1)
    pp, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)  # the Linears' weights: drawn unseeded before
    if rank == 0:
        print(setting_line(0), flush=True)
    if a.nofile:
        resource.setrlimit(resource.RLIMIT_NOFILE,
                           (a.nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    print(f"rank {rank}: before the first, threads and descriptors {held()}", flush=True)
    shown = {1, 2, 10, a.pipelines} | set(range(50, a.pipelines, 50))
    n = 0
    try:
        for n in range(1, a.pipelines + 1):
            pipe = rrfp.Pipeline([torch.nn.Linear(4, 4) for _ in range(pp)],
                                 lambda o, t: (o - t).square().sum(), pp=pp, microbatches=2,
                                 transport="c10d", timeout=30)
            pipe.step(torch.ones(4, 4), torch.zeros(4, 4))
            del pipe
            gc.collect()
            if n in shown:
                print(f"rank {rank}: after {n} pipelines, threads and descriptors {held()}",
                      flush=True)
    except OSError as e:
        print(f"rank {rank}: pipeline {n} failed: {e}", flush=True)
        raise SystemExit(1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
