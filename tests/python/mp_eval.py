"""rrfp.Pipeline.eval_step with a process per stage, run by multiprocess_pipeline.py under mpirun
and torchrun: the last stage's processes get the outputs, every process of a replica the loss;
bitwise the plain forward's."""
import torch

import lm
import rrfp


def run(pp, dp, m, transport):
    chunks_n = lm.chunks(pp)
    epipe = rrfp.Pipeline(lambda i: lm.chunks(pp)[i], lm.loss_fn, pp=pp, microbatches=m,
                          transport=transport, dp=dp, timeout=60)
    xs, ys = lm.batches(m, seed=7 + epipe.replica)
    outs, loss = epipe.eval_step(xs, ys)
    want_loss = None
    with torch.no_grad():
        want = []
        for x, y in zip(xs, ys):
            h = x
            for c in chunks_n:
                h = c(h)
            want.append(h)
            want_loss = lm.loss_fn(h, y) if want_loss is None else want_loss + lm.loss_fn(h, y)
    assert torch.equal(loss, want_loss), (epipe.rank, loss, want_loss)
    if pp - 1 in epipe.stages:
        assert all(torch.equal(o, w) for o, w in zip(outs, want)), epipe.rank
    else:
        assert outs is None, epipe.rank
    print(f"rank {epipe.rank}: eval_step across processes, bitwise", flush=True)
    # An evaluation's loss of any dtype and shape reaches every process of the replica: a count of
    # int64 (accuracy), a loss per sample. A gather of doubles took neither: the last chunk's
    # process failed and the others waited out the timeout.
    for name, fn in (("a count", lambda o, y: (o.argmax(-1) == y).sum()),
                     ("per sample", lambda o, y: torch.nn.functional.cross_entropy(
                         o.transpose(1, 2), y, reduction="none").mean(-1))):
        cpipe = rrfp.Pipeline(lambda i: lm.chunks(pp)[i], fn, pp=pp, microbatches=m,
                              transport=transport, dp=dp, timeout=60)
        _, got = cpipe.eval_step(xs, ys)
        with torch.no_grad():
            each = []
            for x, y in zip(xs, ys):
                h = x
                for c in chunks_n:
                    h = c(h)
                each.append(fn(h, y))
            # A count adds over the microbatches; losses per sample join, as a loop's torch.cat.
            want = sum(each[1:], each[0]) if each[0].dim() == 0 else torch.cat(each)
        assert got.dtype == want.dtype and torch.equal(got, want), (cpipe.rank, name, got, want)
    print(f"rank {epipe.rank}: eval_step's count and per-sample losses on every process",
          flush=True)
