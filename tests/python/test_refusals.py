"""What rrfp.Pipeline refuses, and how: a parameter hook whose result autograd would refuse
fails the step as autograd refuses it, before any .grad changes; a load, save, clip or
evaluation while a step runs raises RuntimeError at once; a constructor argument of the wrong
type raises TypeError, one out of range ValueError, each naming the argument."""
import math
import os
import pathlib
import threading

import pytest
import torch
from torch import nn

import lm
import rrfp


def loss_fn(out, target):
    return ((out - target) ** 2).sum()


def batch():
    torch.manual_seed(0)
    return torch.randn(4, 8), torch.randn(4, 8)


def linears(tied=False, seed=0):
    """Two chunks of two Linear layers; tied: the first layer is one module in both."""
    torch.manual_seed(seed)
    first = nn.Linear(8, 8)
    return [nn.Sequential(first, nn.Linear(8, 8)),
            nn.Sequential(first if tied else nn.Linear(8, 8), nn.Linear(8, 8))]


# Each hook's result is one autograd refuses; "<lambda>" is how autograd names a lambda.
BAD_HOOKS = {
    "a smaller size": lambda g: g[:2],
    "a size that broadcasts": lambda g: g.sum(0, keepdim=True),  # was added in, silently
    "another dtype": lambda g: g.double(),
    "not a tensor": lambda g: 5,  # was added to the sum, silently
}


def plain_loop_error(hook, tied):
    """What a plain loop's backward raises with the hook on the second chunk's last weight."""
    chunks = linears(tied)
    chunks[1][-1 if not tied else 0].weight.register_hook(hook)
    x, y = batch()
    with pytest.raises(Exception) as e:
        loss_fn(chunks[1](chunks[0](x[:2])), y[:2]).backward()
    return e.value


@pytest.mark.parametrize("what", list(BAD_HOOKS))
@pytest.mark.parametrize("tied,hint", [(False, "bf"), (False, "bfw"), (True, "bf")])
def test_a_hook_result_autograd_refuses_fails_the_step_and_changes_no_grad(what, tied, hint):
    # The step raised a bare RuntimeError from .grad's setter after the other parameters'
    # .grad were written, or broadcast a (1, 8) result into every row of .grad.
    hook = BAD_HOOKS[what]
    expected = plain_loop_error(hook, tied)
    chunks = linears(tied)
    for c in chunks:  # a .grad there before the step, which it must keep
        c[-1].weight.grad = torch.ones_like(c[-1].weight)
    param = chunks[1][0 if tied else -1].weight
    handle = param.register_hook(hook)
    pipe = rrfp.Pipeline(chunks, loss_fn, pp=2, microbatches=2, hint=hint)
    before = lm.grads(chunks)
    x, y = batch()
    with pytest.raises(rrfp.StageError, match=r"stage \d: task [BW] c\d m0 failed") as e:
        pipe.step(x, y)
    assert type(e.value.__cause__) is type(expected)
    assert str(e.value.__cause__) == str(expected)  # autograd's words, naming the hook
    after = lm.grads(chunks)
    assert all((a is None and b is None) or torch.equal(a, b) for a, b in zip(before, after))
    handle.remove()  # and the pipeline goes on, as a plain loop does
    for c in chunks:
        c.zero_grad(set_to_none=True)
    pipe.step(x, y)
    ref = linears(tied)
    for xm, ym in zip(x.chunk(2), y.chunk(2)):
        loss_fn(ref[1](ref[0](xm)), ym).backward()
    assert all(torch.equal(p.grad, q.grad) for a, b in zip(chunks, ref)
               for p, q in zip(a.parameters(), b.parameters()))


def test_a_hook_named_by_its_function():
    def halve_rows(g):
        return g[:4]

    chunks = linears()
    chunks[0][0].weight.register_hook(halve_rows)
    with pytest.raises(rrfp.StageError, match="hook 'halve_rows' has changed the size of value"):
        rrfp.Pipeline(chunks, loss_fn, pp=2, microbatches=2).step(*batch())


@pytest.mark.parametrize("call", ["load", "load_state_dict", "save", "clip_grad_norm_",
                                  "eval_step", "unscale_"])
def test_a_call_while_a_step_runs_is_refused_and_the_step_stays_right(call, tmp_path):
    # A load during a step was accepted: the step's gradients then matched neither the old
    # weights nor the loaded ones; a clip returned 0 and left the gradients unclipped.
    saved = tmp_path / "ckpt"
    rrfp.Pipeline(linears(seed=1), loss_fn, pp=2, microbatches=4).save(saved)
    started, go = threading.Event(), threading.Event()

    def hold(stage, kind, chunk, mb):  # the step waits in its first task until the call is made
        if (stage, kind, mb) == (0, "F", 0):
            started.set()
            go.wait(30)
        return 0.0

    x, y = batch()
    calls = {"load": lambda p: p.load(saved),
             "load_state_dict": lambda p: p.load_state_dict(p.state_dict()),
             "save": lambda p: p.save(tmp_path / "other"),
             "clip_grad_norm_": lambda p: p.clip_grad_norm_(1e-3),
             "eval_step": lambda p: p.eval_step(x, y),
             # A scale of 1 leaves the step's gradients the plain loop's bits.
             "unscale_": lambda p: scaler.unscale_(opt)}
    chunks = linears()
    pipe = rrfp.Pipeline(chunks, loss_fn, pp=2, microbatches=4, delay_fn=hold)
    scaler = rrfp.GradScaler(pipe, init_scale=1.0) if call == "unscale_" else None
    opt = torch.optim.SGD([p for c in chunks for p in c.parameters()], lr=0.1)
    step = threading.Thread(target=pipe.step, args=(x, y))
    step.start()
    try:
        assert started.wait(30)
        with pytest.raises(RuntimeError, match=rf"^{call}: (a|another) step of this "
                           r"pipeline is running"):
            calls[call](pipe)
    finally:
        go.set()
        step.join(60)
    assert not step.is_alive()
    ref = linears()
    for xm, ym in zip(x.chunk(4), y.chunk(4)):
        loss_fn(ref[1](ref[0](xm)), ym).backward()
    assert all(torch.equal(p.grad, q.grad) for a, b in zip(chunks, ref)
               for p, q in zip(a.parameters(), b.parameters()))
    calls[call](pipe)  # after the step, the call runs


@pytest.mark.parametrize("kwargs,match", [
    (dict(hint=None), "hint: a schedule's name or rule .* got NoneType None"),
    (dict(policy=None), 'policy: "ready" or "fixed", got NoneType None'),
    (dict(placement=None), 'placement: "loop" or "vshape", got NoneType None'),
    (dict(split_backward=True), 'split_backward: "auto", "on" or "off", got bool True'),
    (dict(comm=1), 'comm: "async" or "blocking", got int 1'),
    (dict(transport=3), 'transport: "inproc", "mpi", "c10d" or None .*got int 3'),
    (dict(group=5), "group: a torch.distributed process group .* or None, got int"),
    (dict(limit=True), "limit: a whole number or None, got bool True"),
    (dict(limit=2.5), "limit: a whole number or None, got float 2.5"),
    (dict(hint="bfw", max_pending_w=True), "max_pending_w: a whole number or None, got bool"),
    (dict(ordered_forwards=1), r"ordered_forwards: True, False or None \(auto\), got int 1"),
    (dict(ordered_forwards=0), r"ordered_forwards: True, False or None \(auto\), got int 0"),
    (dict(ordered_forwards="yes"), "ordered_forwards: True, False or None"),
    (dict(progress=True), 'progress: seconds as a number, "auto" or None, got bool True'),
    (dict(progress=[1]), "progress: seconds as a number"),
])
def test_an_argument_of_the_wrong_type_is_a_type_error_naming_it(kwargs, match):
    args = dict(pp=2, microbatches=2)
    args.update(kwargs)
    with pytest.raises(TypeError, match=match):
        rrfp.Pipeline(linears(), loss_fn, **args)


@pytest.mark.parametrize("option", ["group", "dp_group", "collectives", "arrivals",
                                    "arrival_replicas"])
def test_the_cxx_half_names_a_group_it_cannot_take(option):
    # rrfp.Pipeline checks the type first; the C++ half checks again, because a torch
    # ProcessGroup that does not cast there means a build against another pybind11 ABI, and
    # anything else must not be reported as that.
    args = dict(pp=2, vpp=1, microbatches=2, placement="loop", split_backward="off", hint="1f1b",
                policy="ready", limit=0, max_pending_w=0, comm="async", timeout=10.0,
                arrival_timeout=10.0, transport="inproc")
    with pytest.raises(TypeError, match=f"^{option}: a torch.distributed ProcessGroup, got list$"):
        rrfp._rrfp.PipelineCore(**args, **{option: []})


def test_chunks_that_are_no_list_or_function_and_a_simulated_count_of_true_are_named():
    # "'NoneType' object is not iterable", naming no argument; simulate(pp=True) ran pp=1,
    # where Pipeline(pp=True) raised TypeError.
    with pytest.raises(TypeError, match="chunks: a list of nn.Module or a function chunk_fn"):
        rrfp.Pipeline(None, loss_fn, pp=2, microbatches=2)
    # Iterated, a dict gave its keys ("chunks: chunk 0 is a int"), and a set no order.
    two = [nn.Linear(4, 4), nn.Linear(4, 4)]
    for chunks, got in (({0: two[0], 1: two[1]}, "dict .list.chunks.values.."),
                        (nn.ModuleDict({"a": two[0], "b": two[1]}), "ModuleDict"),
                        (set(two), "set$"), ("ab", "str$")):
        with pytest.raises(TypeError, match=f"chunks: a list of nn.Module or a .* got {got}"):
            rrfp.Pipeline(chunks, loss_fn, pp=2, microbatches=2)
    with pytest.raises(TypeError, match="chunks: chunk 1 is of type int, not an nn.Module"):
        rrfp.Pipeline([two[0], 1], loss_fn, pp=2, microbatches=2)
    for kwargs, match in ((dict(pp=True), "pp: a whole number .* got bool True"),
                          (dict(microbatches=2.0), "microbatches: a whole number"),
                          (dict(seed="1"), "seed: a whole number in 0..2\\*\\*64-1")):
        with pytest.raises(TypeError, match=match):
            rrfp.simulate(**kwargs)
    for kwargs, match in ((dict(tp=2**40), "tp: a whole number in"), (dict(seed=-1), "seed:")):
        with pytest.raises(ValueError, match=match):
            rrfp.simulate(**kwargs)


def test_simulate_takes_numpy_integers_as_split_does():
    # A count computed with NumPy (np.int64) was a TypeError, where rrfp.split takes one.
    import numpy as np
    got = rrfp.simulate(pp=np.int64(2), microbatches=np.int32(4), seed=np.uint64(7),
                        hint="bf", policy="ready")
    want = rrfp.simulate(pp=2, microbatches=4, seed=7, hint="bf", policy="ready")
    assert got.table() == want.table()
    with pytest.raises(TypeError, match="pp: a whole number .* got bool_ True"):
        rrfp.simulate(pp=np.bool_(True))


@pytest.mark.parametrize("kwargs,match", [
    (dict(limit=10**12), r"limit: must be a whole number of at least 1 \(and at most "
                         r"2147483647\), or None or 0 for the default, got 1000000000000"),
    (dict(hint="bfw", max_pending_w=10**12), r"max_pending_w: .*at most 2147483647"),
    (dict(microbatches=10**12), "microbatches: must be at least 1 and at most 2147483647"),
    (dict(dp=-10**12), "dp: must be at least 1"),
    (dict(progress=math.nan), r"progress: seconds \(at least 0; inf: never\)"),
    (dict(progress=-10**400), "progress: seconds"),
    (dict(progress="soon"), "progress: seconds, \"auto\" or None, got 'soon'"),
    (dict(policy="rrfp"), r"policy`?: unknown policy 'rrfp' \(expected fixed or ready\)"),
])
def test_an_argument_out_of_range_is_a_value_error_naming_it(kwargs, match):
    args = dict(pp=2, microbatches=2)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        rrfp.Pipeline(linears(), loss_fn, **args)


@pytest.mark.parametrize("progress", [math.inf, 10**400, 1e300],
                         ids=["inf", "10**400", "1e300"])
def test_a_progress_of_no_end_shows_nothing(progress, capfd):
    # inf raised OverflowError in the progress thread, a traceback on stderr every step.
    failed, before = [], threading.excepthook
    threading.excepthook = lambda args: failed.append(args.exc_value)
    try:
        pipe = rrfp.Pipeline(linears(), loss_fn, pp=2, microbatches=2, progress=progress)
        pipe.step(*batch())
    finally:
        threading.excepthook = before
    assert not failed
    assert capfd.readouterr().err == ""


def test_a_hint_file_given_as_a_path(tmp_path):
    hint = tmp_path / "order.txt"
    hint.write_text("rrfp-hint 1 pp=2 vpp=1 microbatches=2 placement=loop split=0\n"
                    "stage 0: F0:0 F0:1 B0:0 B0:1\n"
                    "stage 1: F1:0 F1:1 B1:0 B1:1\n")
    xs, ys = lm.batches(2)
    pipe = rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, microbatches=2,
                         hint=pathlib.Path(hint), policy="fixed")
    assert torch.equal(pipe.step(xs, ys), lm.reference_step(lm.chunks(2), xs, ys))
    # A path object of a bare name names the file, even one named as a schedule: the file
    # `gpipe`, written for 2 microbatches, was ignored for the built-in gpipe.
    (tmp_path / "gpipe").write_text(hint.read_text())
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with pytest.raises(ValueError, match="written for microbatches=2"):
            rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, microbatches=4,
                          hint=pathlib.Path("gpipe"), policy="fixed")
        # The name as a string runs the built-in, as rrfp.simulate's does: said, at the
        # caller's line (it ran without a word).
        with pytest.warns(UserWarning, match="give './gpipe' or a path object") as said:
            rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, microbatches=4, hint="gpipe",
                          policy="fixed")
        assert said[0].filename == __file__
    finally:
        os.chdir(cwd)


def test_a_tensor_with_no_data_between_chunks_fails_its_producers_task_in_one_line():
    # LibTorch's refusal carried its C++ stack frames, 30 lines, into the step's error; its
    # one line ("Cannot copy out of meta tensor; no data!") said nothing of what to do.
    class Meta(nn.Module):
        def forward(self, x):
            return torch.empty(x.shape, device="meta")

    pipe = rrfp.Pipeline([Meta(), nn.Linear(8, 8)], loss_fn, pp=2, microbatches=2)
    for run in (lambda: pipe.step(*batch()), lambda: pipe.eval_step(batch()[0])):
        with pytest.raises(rrfp.StageError,
                           match=r"^stage 0: task F c0 m0 failed: F c0 m0: a tensor on the "
                                 r"meta device holds no values to send between stages; "
                                 r"materialize it \(to_empty\(\) on a device\) first$"):
            run()


def test_each_refusal_names_its_argument_and_says_the_truth(tmp_path):
    # An int given as a state or optimizer failed with AttributeError naming no argument; an
    # init_scale of 0 was said to be "in (0, inf)" wanting, though 1e-45 and 1e39 are refused
    # too; an empty nn.Sequential was asked for chunks "in 1..0"; a checkpoint folder that does
    # not exist was said to hold "no part-*.pt".
    pipe = rrfp.Pipeline(linears(), loss_fn, pp=2, microbatches=2)
    with pytest.raises(TypeError, match="load_state_dict: state must be a mapping .* got int"):
        pipe.load_state_dict(3)
    scaler = rrfp.GradScaler(pipe)
    for call in (scaler.unscale_, scaler.step):
        with pytest.raises(TypeError, match="optimizer: a torch.optim.Optimizer .* got int"):
            call(3)
    with pytest.raises(TypeError, match="new_scale: a number or a one-element tensor, got str"):
        scaler.update("x")
    for bad in (0, 1e-45, 1e39):
        with pytest.raises(ValueError, match=r"init_scale: .*2\*\*-126"):
            rrfp.GradScaler(init_scale=bad)
    assert rrfp.GradScaler(init_scale=2.0**-126).get_scale() == 2.0**-126
    with pytest.raises(ValueError, match="split: the model is an empty nn.Sequential"):
        rrfp.split(nn.Sequential(), chunks=1)
    with pytest.raises(FileNotFoundError, match="no such folder"):
        pipe.load(str(tmp_path / "nothing"))


def test_an_empty_output_path_and_a_strict_of_no_bool_are_refused():
    # '' failed renaming a temporary made in '.', and strict="no" was taken as true.
    rec = rrfp.simulate(pp=2, microbatches=2)
    for save in (rec.save_trace, rec.save_svg):
        with pytest.raises(ValueError, match="path: '' names nothing"):
            save("")
    pipe = rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, microbatches=2)
    with pytest.raises(TypeError, match="strict must be True or False, got str 'no'"):
        pipe.load_state_dict(pipe.state_dict(), strict="no")
