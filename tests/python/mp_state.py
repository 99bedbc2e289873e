"""What a stage keeps besides its parameters, with a process per stage; run by
multiprocess_pipeline.py under mpirun and torchrun: forwards ordered over the job for a batch
norm, seeded dropout, and data-parallel replicas that keep replica 0's parameters and buffers.
Each ends bitwise where a plain loop ends."""
import torch

import rrfp


def mse(y, t):
    return ((y - t) ** 2).mean()


# Ordered forwards, agreed over the job: a batch norm in the first chunk only (stage 0's
# process) orders forwards on every process alike, and stage 0's running statistics end where
# a plain loop's do under the adaptive hint, which reorders forwards by microbatch size.
def stat_chunk(i):
    torch.manual_seed(100 + i)
    layers = [torch.nn.Linear(8, 8)] + ([torch.nn.BatchNorm1d(8)] if i == 0 else [])
    return torch.nn.Sequential(*layers)


def ordered_forwards(pp, dp, transport, g):
    sizes = [3, 9, 4, 12]
    sx = [torch.randn(k, 8, generator=g) for k in sizes]
    sy = [torch.randn(k, 8, generator=g) for k in sizes]
    spipe = rrfp.Pipeline(stat_chunk, mse, pp=pp, microbatches=4, hint="adaptive",
                          transport=transport, dp=dp, timeout=60)
    assert spipe.ordered_forwards, spipe.rank
    spipe.step(sx, sy)
    if 0 in spipe.stages:
        ref0 = stat_chunk(0)
        for x in sx:
            ref0(x)
        assert all(torch.equal(a, b) for a, b in zip(ref0.buffers(), spipe.chunks[0].buffers())), \
            spipe.rank
    print(f"rank {spipe.rank}: ordered forwards agreed over the job", flush=True)


# seed=: dropout draws what a plain loop seeded with rrfp.task_seed draws, in every process.
def drop_chunk(i):
    torch.manual_seed(200 + i)
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.4))


def seeded_dropout(pp, dp, transport, g):
    dpipe = rrfp.Pipeline(drop_chunk, mse, pp=pp, microbatches=4, hint="bf",
                          transport=transport, dp=dp, timeout=60, seed=99)
    dx = [torch.randn(3, 8, generator=g) for _ in range(4)]
    dy = [torch.randn(3, 8, generator=g) for _ in range(4)]
    dpipe.step(dx, dy)
    # Replica r's microbatch mb draws as microbatch r * 4 + mb of one pipeline; the replicas'
    # sums are added in replica order (every replica trains on the same data here).
    want = None
    for r in range(dp):
        dref = [drop_chunk(i) for i in range(pp)]
        for mb, (x, y) in enumerate(zip(dx, dy)):
            h = x
            for c, chunk in enumerate(dref):
                torch.manual_seed(rrfp.task_seed(99, 0, c, r * 4 + mb))
                h = chunk(h)
            mse(h, y).backward()
        got = [[p.grad for p in ch.parameters()] for ch in dref]
        want = got if want is None else [[a + b for a, b in zip(w, g)] for w, g in zip(want, got)]
    for c, module in dpipe.chunks.items():
        assert all(torch.equal(p.grad, b) for p, b in zip(module.parameters(), want[c])), \
            (dpipe.rank, c)
    print(f"rank {dpipe.rank}: seeded dropout across processes, bitwise", flush=True)


# Data-parallel replicas keep replica 0's state, as under DDP: chunks built apart (a seed per
# process) start from replica 0's parameters and buffers, and after a step every replica holds
# the running statistics of replica 0's microbatches. Replicas used to train apart, and their
# batch norms to give other evaluations.
def bn_chunk(i, rank):
    torch.manual_seed(300 + i + 1000 * rank)
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8))


def bn_batches(r):
    g = torch.Generator().manual_seed(50 + r)
    return ([torch.randn(k, 8, generator=g) for k in (3, 5, 4, 6)],
            [torch.randn(k, 8, generator=g) for k in (3, 5, 4, 6)])


def replicas_keep_replica_0(pp, dp, transport, job_rank):
    bpipe = rrfp.Pipeline(lambda i: bn_chunk(i, job_rank), mse, pp=pp, microbatches=4, hint="bf",
                          transport=transport, dp=dp, timeout=60)
    for c, module in bpipe.chunks.items():  # replica 0's process of chunk c is rank c
        first = bn_chunk(c, c)
        assert all(torch.equal(a, b) for a, b in zip(module.state_dict().values(),
                                                     first.state_dict().values())), bpipe.rank
    bpipe.step(*bn_batches(bpipe.replica))
    want, stats = None, None
    for r in range(dp):  # a plain loop over each replica's microbatches from replica 0's state
        bref = [bn_chunk(i, i) for i in range(pp)]
        for x, y in zip(*bn_batches(r)):
            h = x
            for chunk in bref:
                h = chunk(h)
            mse(h, y).backward()
        got = [[p.grad for p in ch.parameters()] for ch in bref]
        want = got if want is None else [[a + b for a, b in zip(w, g)] for w, g in zip(want, got)]
        stats = stats or [list(ch.buffers()) for ch in bref]  # replica 0's
    for c, module in bpipe.chunks.items():
        assert all(torch.equal(p.grad, b) for p, b in zip(module.parameters(), want[c])), \
            (bpipe.rank, c)
        assert all(torch.equal(a, b) for a, b in zip(module.buffers(), stats[c])), (bpipe.rank, c)
    print(f"rank {bpipe.rank}: replicas keep replica 0's parameters and buffers", flush=True)


# A loss_fn that is a module holding a batch norm: after a step every replica's holds replica
# 0's running statistics, as the chunks' do (each replica kept its own).
class NormedLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(8, affine=False)
        # A sparse buffer: replica 0's failed to pack, and the others waited for it.
        self.register_buffer("mask", torch.eye(8).to_sparse())

    def forward(self, y, t):
        return mse(self.bn(y), t)


def lin_chunk(i):
    torch.manual_seed(400 + i)
    return torch.nn.Linear(8, 8)


def loss_buffers_follow_replica_0(pp, dp, transport):
    loss = NormedLoss()
    lpipe = rrfp.Pipeline(lin_chunk, loss, pp=pp, microbatches=4, hint="bf",
                          transport=transport, dp=dp, timeout=60)
    lpipe.step(*bn_batches(lpipe.replica))
    if pp - 1 in lpipe.chunks:
        ref, ref_loss = [lin_chunk(i) for i in range(pp)], NormedLoss()
        for x, y in zip(*bn_batches(0)):  # replica 0's microbatches, in order
            h = x
            for chunk in ref:
                h = chunk(h)
            ref_loss(h, y)
        assert all(torch.equal(a.to_dense(), b.to_dense())
                   for a, b in zip(loss.buffers(), ref_loss.buffers())), lpipe.rank
        assert loss.mask.is_coalesced(), lpipe.rank  # its indices() raised on replica 1
    print(f"rank {lpipe.rank}: loss_fn's buffers are replica 0's", flush=True)


# A batch norm and a buffer sized by the batch (a cache of the last input).
class Remembers(torch.nn.Module):
    def __init__(self, i):
        super().__init__()
        torch.manual_seed(500 + i)
        self.lin, self.bn = torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8)
        self.register_buffer("last", torch.zeros(1, 8))

    def forward(self, x):
        self.last = x.detach().clone()
        return self.bn(self.lin(x))


def evaluate_alike(pipe, what):
    """An evaluation of the same input on every replica gives the same loss, and leaves every
    replica's statistics replica 0's; then a step trains."""
    for module in pipe.chunks.values():
        module.eval()
    x = torch.linspace(-2, 2, 32).reshape(4, 8)
    _, got = pipe.eval_step(x, torch.zeros(4, 8))
    mine = [got.item()] + [m.bn.running_mean.double().sum().item() for m in pipe.chunks.values()]
    every = pipe._core.all_gather(mine)
    assert all(every[r] == every[r % pipe.pp] for r in range(len(every))), (pipe.rank, every)
    for module in pipe.chunks.values():
        module.train()
    pipe.step(*bn_batches(20))
    print(f"rank {pipe.rank}: {what}, the replicas evaluate alike and train on", flush=True)


# A step that fails on one replica leaves each replica's buffers as its own forwards left them
# (the cache of another size in each); the next step or eval_step begins by taking replica 0's
# where they are alike, so an evaluation right after the failure gives every replica the same
# outputs (each used its own statistics), and the steps after it train (a cache of another
# size in each replica refused every later step, for good).
def failed_step_leaves_no_replica_apart(pp, dp, transport):
    fail = {"on": False}

    def loss_fn(y, t):
        if fail["on"] and fpipe.replica == 1:
            raise ValueError("planted")
        return mse(y, t)
    fpipe = rrfp.Pipeline(Remembers, loss_fn, pp=pp, microbatches=4, hint="bf",
                          transport=transport, dp=dp, timeout=60)
    fpipe.step(*bn_batches(fpipe.replica))
    fail["on"] = True
    try:
        fpipe.step(*bn_batches(10 + fpipe.replica))
    except rrfp.StageError:
        pass
    else:
        raise AssertionError(f"rank {fpipe.rank}: the planted failure did not fail the step")
    fail["on"] = False
    evaluate_alike(fpipe, "after a failed step")


# A step refused after its forwards ran (the replicas' caches came out in other shapes: each
# replica's batch of another size) leaves the statistics apart too; the evaluation after it
# gave each replica its own outputs.
def refused_step_leaves_no_replica_apart(pp, dp, transport):
    rpipe = rrfp.Pipeline(Remembers, mse, pp=pp, microbatches=4, hint="bf",
                          transport=transport, dp=dp, timeout=60)
    xs, ys = bn_batches(rpipe.replica)
    if rpipe.replica == 1:
        xs, ys = [x[:-1] for x in xs], [y[:-1] for y in ys]
    try:
        rpipe.step(xs, ys)
    except ValueError as e:
        assert "buffer 'last'" in str(e), e
    else:
        raise AssertionError(f"rank {rpipe.rank}: caches of other shapes were taken")
    evaluate_alike(rpipe, "after a step refused past its forwards")


# A buffer that replica 0 cannot send (sparse CSR), made by a forward: refused on every process
# in the step's closing exchange (its stage's processes alone raised, the others' step went on
# and wrote .grad).
class MakesCsr(torch.nn.Linear):
    def __init__(self, i):
        torch.manual_seed(600 + i)
        super().__init__(8, 8)
        self.register_buffer("m", torch.zeros(3, 3))
        self.csr = False

    def forward(self, x):
        if self.csr:
            self.m = torch.eye(3).to_sparse_csr()
        return super().forward(x)


def unsendable_buffer_refused_everywhere(pp, dp, transport):
    cpipe = rrfp.Pipeline(MakesCsr, mse, pp=pp, microbatches=4, hint="bf", transport=transport,
                          dp=dp, timeout=60)
    cpipe.step(*bn_batches(0))
    for module in cpipe.chunks.values():
        module.csr = module is cpipe.chunks.get(0)
    try:
        cpipe.step(*bn_batches(1))
    except ValueError as e:
        assert "chunk 0's buffer 'm' in replica 0 is torch.float32 torch.sparse_csr" in str(e), e
    else:
        raise AssertionError(f"rank {cpipe.rank}: a buffer replica 0 cannot send was taken")
    print(f"rank {cpipe.rank}: a buffer replica 0 cannot send refused on every process", flush=True)


def run(pp, dp, transport, job_rank):
    g = torch.Generator().manual_seed(7)  # one generator: the draws follow each other
    ordered_forwards(pp, dp, transport, g)
    seeded_dropout(pp, dp, transport, g)
    if dp > 1:
        replicas_keep_replica_0(pp, dp, transport, job_rank)
        loss_buffers_follow_replica_0(pp, dp, transport)
        failed_step_leaves_no_replica_apart(pp, dp, transport)
        refused_step_leaves_no_replica_apart(pp, dp, transport)
        unsendable_buffer_refused_everywhere(pp, dp, transport)
