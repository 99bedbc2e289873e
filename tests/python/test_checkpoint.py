"""Checkpoints of a pipelined model: state_dict names entries by chunk, so a checkpoint written
by one layout loads into another that cuts the model into the same chunks; training on from a
save is bitwise training on without the stop, model and AdamW state alike."""
import pytest
import torch

import lm
import rrfp


def train(pipe, opt, first, steps):
    params = [p for c in pipe.chunks.values() for p in c.parameters()]
    for s in range(first, first + steps):
        for p in params:
            p.grad = None
        xs, ys = lm.batches(4, seed=s)
        pipe.step(xs, ys)
        opt.step()


def pipeline(chunks, **kw):
    return rrfp.Pipeline(chunks, lm.loss_fn, microbatches=4, timeout=60, **kw)


def adamw(chunks):
    return torch.optim.AdamW([p for c in chunks for p in c.parameters()], lr=0.01,
                             weight_decay=0.1)


@pytest.mark.parametrize("second", [dict(pp=4), dict(pp=2, vpp=2, placement="vshape"),
                                    dict(pp=1, vpp=4)], ids=["pp4", "pp2-vshape", "pp1"])
def test_resume_on_another_layout_is_the_uninterrupted_run(tmp_path, second):
    whole = lm.chunks(4)
    opt = adamw(whole)
    train(pipeline(whole, pp=2, vpp=2), opt, 0, 8)

    first = lm.chunks(4)
    opt1 = adamw(first)
    pipe1 = pipeline(first, pp=2, vpp=2)
    train(pipe1, opt1, 0, 4)
    pipe1.save(str(tmp_path / "ckpt"), opt1, step=4)

    resumed = lm.chunks(4, seed=99)  # other weights: the checkpoint must replace all of them
    opt2 = adamw(resumed)
    pipe2 = pipeline(resumed, **second)
    extra = pipe2.load(str(tmp_path / "ckpt"), opt2)
    assert extra == {"step": 4}
    train(pipe2, opt2, extra["step"], 4)

    for c, r in zip(whole, resumed):
        for (n, p), q in zip(c.named_parameters(), r.parameters()):
            assert torch.equal(p, q), n
    for p, q in zip((p for c in whole for p in c.parameters()),
                    (p for c in resumed for p in c.parameters())):
        for k in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(opt.state[p][k], opt2.state[q][k])


def test_state_dict_names_entries_by_chunk_and_loads_back():
    chunks = lm.chunks(2)
    pipe = pipeline(chunks, pp=2)
    sd = pipe.state_dict()
    assert all(k.split(".")[0] in ("0", "1") for k in sd)
    assert len(sd) == sum(len(c.state_dict()) for c in chunks)
    other = lm.chunks(2, seed=5)
    pipe2 = pipeline(other, pp=2)
    pipe2.load_state_dict(sd)
    for c, o in zip(chunks, other):
        for p, q in zip(c.parameters(), o.parameters()):
            assert torch.equal(p, q)


def test_bad_checkpoints_are_refused(tmp_path):
    pipe = pipeline(lm.chunks(2), pp=2)
    sd = pipe.state_dict()
    with pytest.raises(KeyError, match="names no chunk .*a state of the model before it was "
                                       "split names its own modules"):
        pipe.load_state_dict({**sd, "x.weight": torch.zeros(1)})
    # A state of a pipeline cut into more chunks says so (it was told only of an unsplit
    # model's state).
    with pytest.raises(KeyError, match="names chunks up to 7 where this pipeline has 2 \\(0..1\\): "
                                       "a pipeline's state loads into one cut into the same "
                                       "chunks \\(on any layout\\); a state of the model before"):
        pipe.load_state_dict({**sd, "7.weight": torch.zeros(1)})
    # A state of the model cut into fewer chunks, its names not this chunk's, says which
    # chunks it lacks (it told only the names missing and unexpected).
    with pytest.raises(KeyError, match="chunk 1: missing \\[\\], unexpected \\[1.weight, .*\\]; "
                                       "it holds no entry of chunks 2, 3 of this model's 4: "
                                       "saved from a model cut into other chunks\\?"):
        pipeline(lm.chunks(4), pp=2, vpp=2).load_state_dict(sd)
    # ...but a renamed key of the same chunking is not asked so, though a chunk of no
    # parameters (a ReLU) holds no entry.
    relu = pipeline([torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4)], pp=3)
    renamed = relu.state_dict()
    renamed["2.weightx"] = renamed.pop("2.weight")
    with pytest.raises(KeyError, match="chunk 2: missing \\[weight\\], unexpected \\[weightx\\]'") as e:
        relu.load_state_dict(renamed)
    assert "other chunks" not in str(e.value)
    with pytest.raises(KeyError, match="chunk 1: missing .* no entry of chunk 1 .*chunks: 0,"):
        pipe.load_state_dict({k: v for k, v in sd.items() if not k.startswith("1.")})
    # Not strict: what was skipped comes back, as torch's load_state_dict returns it (None).
    skipped = pipe.load_state_dict({**{k: v for k, v in sd.items() if not k.startswith("1.")},
                                    "7.weight": torch.zeros(1)}, strict=False)
    assert skipped.missing_keys == [k for k in sd if k.startswith("1.")]
    assert skipped.unexpected_keys == ["7.weight"]
    assert pipe.load_state_dict(sd) == ([], [])
    # A state of no chunk at all says so (it read "its chunks: , of this model's 2").
    with pytest.raises(KeyError, match="no entry of any of this model's 2 chunks"):
        pipe.load_state_dict({})
    # A value of the wrong type is a TypeError (it was a ValueError, as a wrong shape is).
    first = next(iter(sd))
    with pytest.raises(TypeError, match=f"'{first}' is a list, not a tensor"):
        pipe.load_state_dict({**sd, first: sd[first].tolist()}, strict=False)
    # An extra that cannot be pickled is refused naming it (pickle's AttributeError named none),
    # and nothing is written.
    with pytest.raises(TypeError, match="extra 'step' cannot be saved"):
        pipe.save(str(tmp_path / "unpicklable"), step=lambda: 1)
    assert not (tmp_path / "unpicklable").exists() or not any((tmp_path / "unpicklable").iterdir())
    with pytest.raises(FileNotFoundError, match="no such folder"):
        pipe.load(str(tmp_path / "nothing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no part"):
        pipe.load(str(tmp_path / "empty"))
    pipe.save(str(tmp_path / "model-only"))
    with pytest.raises(KeyError, match="no optimizer state"):
        pipe.load(str(tmp_path / "model-only"), adamw(pipe.chunks.values()))
    opt = adamw(pipe.chunks.values())
    for call in (pipe.save, pipe.load):
        with pytest.raises(TypeError, match="optimizer must be one optimizer .* got list"):
            call(str(tmp_path / "model-only"), [opt, opt])
    foreign = torch.optim.SGD([torch.zeros(2, requires_grad=True)], lr=1)
    with pytest.raises(ValueError, match="not this pipeline"):
        pipe.save(str(tmp_path / "x"), foreign)
    pipe.save(str(tmp_path / "with-optimizer"), opt)
    with pytest.raises(ValueError, match="not this pipeline"):  # was a KeyError of its id
        pipe.load(str(tmp_path / "with-optimizer"), foreign)


def _weights(pipe):
    return [p.detach().clone() for c in pipe.chunks.values() for p in c.parameters()]


def _manifest(folder):
    import json
    import os
    with open(os.path.join(folder, "manifest.json")) as f:
        return json.load(f)


def test_a_save_is_one_checkpoint_or_none(tmp_path):
    # A part of another save than the folder's manifest (its files copied or changed since) is
    # refused, naming it; the parts of an earlier save or layout are removed by the next save
    # and never read (they were merged over the chunks).
    import os
    import shutil
    pipe = pipeline(lm.chunks(2), pp=2)
    opt = adamw(pipe.chunks.values())
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    torch.save({"model": {}}, os.path.join(tmp_path, "stale.pt"))
    os.makedirs(a)
    shutil.copy(os.path.join(tmp_path, "stale.pt"), os.path.join(a, "part-1.pt"))  # earlier
    pipe.save(a, opt, step=1)
    saved = _weights(pipe)
    token = _manifest(a)["token"]
    assert sorted(os.listdir(a)) == ["manifest.json", rrfp.checkpoint.part_name(0, token)]
    train(pipe, opt, 1, 1)
    pipe.save(b, opt, step=2)
    again = pipeline(lm.chunks(2, seed=99), pp=2)
    assert again.load(a) == {"step": 1}
    assert all(torch.equal(p, q) for p, q in zip(_weights(again), saved))
    shutil.copy(os.path.join(b, rrfp.checkpoint.part_name(0, _manifest(b)["token"])),
                os.path.join(a, rrfp.checkpoint.part_name(0, token)))
    with pytest.raises(ValueError, match=r"part-0\.[0-9a-f]{12}\.pt holds a part of another "
                                         r"save than its manifest.json \(its step 2\)"):
        again.load(a)


@pytest.mark.parametrize("fails", ["part", "manifest"])
def test_a_failed_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch, fails):
    # The disk full as the part, or the manifest (the commit), is written: OSError, nothing of
    # the failed save left, and the previous save loads.
    import errno
    import os
    pipe = pipeline(lm.chunks(2), pp=2)
    opt = adamw(pipe.chunks.values())
    folder = str(tmp_path / "ck")
    pipe.save(folder, opt, step=1)
    saved = _weights(pipe)
    before = sorted(os.listdir(folder))
    train(pipe, opt, 1, 1)
    write = rrfp.checkpoint._write_file

    def full(path, data):
        if os.path.basename(path).startswith("part-" if fails == "part" else "manifest"):
            raise OSError(errno.ENOSPC, "No space left on device")
        write(path, data)
    monkeypatch.setattr(rrfp.checkpoint, "_write_file", full)
    with pytest.raises(OSError, match="No space left"):
        pipe.save(folder, opt, step=2)
    monkeypatch.undo()
    assert sorted(os.listdir(folder)) == before
    again = pipeline(lm.chunks(2, seed=99), pp=2)
    assert again.load(folder) == {"step": 1}
    assert all(torch.equal(p, q) for p, q in zip(_weights(again), saved))


def _state(pipe, opt, scaler):
    """Everything a load may change: weights, optimizer state, scale and seed step."""
    return (_weights(pipe), repr(opt.state_dict()), scaler.state_dict(), pipe._data.seed_step)


def _same(a, b):
    return (len(a[0]) == len(b[0]) and all(torch.equal(p, q) for p, q in zip(a[0], b[0])) and
            a[1:] == b[1:])


@pytest.mark.parametrize("case", ["no-optimizer-state", "other-shape", "other-dtype",
                                  "fewer-chunks", "bad-scaler-state"])
def test_a_refused_load_changes_nothing(tmp_path, case):
    # Refused after part of it was applied, a load left weights (chunk 0 of 2, or the 2 chunks
    # of a 2-chunk checkpoint in a 4-chunk model), the seed step and the scale loaded.
    folder = str(tmp_path / "ck")
    saver = pipeline(lm.chunks(2, seed=1), pp=2, seed=7)
    scaler = rrfp.GradScaler(saver, init_scale=8.0)
    saver_opt = adamw(saver.chunks.values())
    train(saver, saver_opt, 0, 2)
    if case == "bad-scaler-state":
        scaler._growth_tracker = -1  # a damaged state, found before anything is loaded
    saver.save(folder, None if case == "no-optimizer-state" else saver_opt, step=2)
    if case == "other-shape":
        chunks = lm.chunks(2, d=16)
    elif case == "fewer-chunks":
        chunks = lm.chunks(4)
    else:
        chunks = lm.chunks(2)
    pipe = pipeline(chunks, pp=2, vpp=len(chunks) // 2, seed=7)
    opt = adamw(chunks)
    train(pipe, opt, 0, 1)
    if case == "other-dtype":
        chunks[1].double()
    mine = rrfp.GradScaler(pipe, init_scale=2.0)
    before = _state(pipe, opt, mine)
    error, words = {"no-optimizer-state": (KeyError, "no optimizer state"),
                    "other-shape": (ValueError, "chunk 0: '0.*has shape"),
                    "other-dtype": (ValueError, "float64, the chunk's torch.float32|torch.float32, "
                                    "the chunk's torch.float64"),
                    "fewer-chunks": (KeyError, "chunk 1: missing \\[\\], unexpected"),
                    "bad-scaler-state": (ValueError, "GradScaler state")}[case]
    with pytest.raises(error, match=words):
        pipe.load(folder, opt)
    assert _same(_state(pipe, opt, mine), before)


def test_a_refused_state_dict_loads_nothing():
    pipe = pipeline(lm.chunks(2), pp=2)
    sd = {k: v.clone() for k, v in pipeline(lm.chunks(2, seed=3), pp=2).state_dict().items()}
    before = _weights(pipe)
    key = next(k for k in sd if k.startswith("1."))
    sd[key] = torch.zeros(3)
    with pytest.raises(ValueError, match=f"'{key}' has shape \\[3\\]"):
        pipe.load_state_dict(sd)
    assert all(torch.equal(p, q) for p, q in zip(before, _weights(pipe)))


def test_a_save_takes_the_optimizer_on_every_process_of_trainable_chunks_or_none():
    """The processes' rows [token, optimizer given, chunks trainable]: a process of frozen or
    parameterless chunks may give none; one holding trainable parameters may not, where another
    gave one (its stages' optimizer state was left out of the checkpoint silently)."""
    from rrfp import _saving
    _saving._refuse_optimizer_on_some([[7, 1, 1], [0, 0, 0], [0, 1, 1]])
    _saving._refuse_optimizer_on_some([[7, 0, 1], [0, 0, 1]])
    with pytest.raises(ValueError, match=r"given on process\(es\) 0, 2 and not on process\(es\) "
                       r"1, whose chunks hold trainable parameters.*nothing was saved"):
        _saving._refuse_optimizer_on_some([[7, 1, 1], [0, 0, 1], [0, 1, 0]])
