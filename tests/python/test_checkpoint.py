"""Checkpoints of a pipelined model: state_dict names entries by chunk, so a checkpoint written
by one layout loads into another that cuts the model into the same chunks; training on from a
save is bitwise training on without the stop, model and AdamW state alike."""
import pytest
import torch
from torch import nn

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
    with pytest.raises(KeyError, match="names no chunk"):
        pipe.load_state_dict({**sd, "7.weight": torch.zeros(1)})
    with pytest.raises(KeyError, match="chunk 1: missing .* no entry of chunk 1 .*chunks: 0,"):
        pipe.load_state_dict({k: v for k, v in sd.items() if not k.startswith("1.")})
    # Not strict: what was skipped comes back, as torch's load_state_dict returns it (None).
    skipped = pipe.load_state_dict({**{k: v for k, v in sd.items() if not k.startswith("1.")},
                                    "7.weight": torch.zeros(1)}, strict=False)
    assert skipped.missing_keys == [k for k in sd if k.startswith("1.")]
    assert skipped.unexpected_keys == ["7.weight"]
    assert pipe.load_state_dict(sd) == ([], [])
    with pytest.raises(FileNotFoundError, match="no part"):
        pipe.load(str(tmp_path / "nothing"))
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


@pytest.mark.parametrize("parts,words", [
    (1_000_000, "names 1000000 parts, not a whole number in 1..65536"),
    (10**9, "names 1000000000 parts"), (True, "names True parts"), ("2", "names '2' parts"),
    (0, "names 0 parts"), (None, "names None parts"),
    (3, "names 3 parts, more than this model's 2 chunks")])
def test_a_manifests_fields_are_checked_before_use(tmp_path, parts, words):
    # A part count of 10**6 took seconds and a message of 28 MB, 10**9 minutes; true was 1.
    import json
    import time
    folder = str(tmp_path / "ck")
    pipe = pipeline(lm.chunks(2), pp=2)
    pipe.save(folder)
    m = _manifest(folder)
    with open(f"{folder}/manifest.json", "w") as f:
        json.dump(dict(m, parts=parts), f)
    start = time.monotonic()
    with pytest.raises(ValueError, match=f"checkpoint '{folder}': manifest.json .*{words}"):
        pipe.load(folder)
    assert time.monotonic() - start < 5
    for token in (True, "1", -1, 2**48, 1.0):
        with open(f"{folder}/manifest.json", "w") as f:
            json.dump(dict(m, token=token), f)
        with pytest.raises(ValueError, match="its token is"):
            pipe.load(folder)


def test_missing_parts_are_named_briefly(tmp_path):
    import json
    folder = str(tmp_path / "ck")
    pipe = pipeline(lm.chunks(8), pp=1, vpp=8)
    pipe.save(folder)
    m = _manifest(folder)
    with open(f"{folder}/manifest.json", "w") as f:
        json.dump(dict(m, parts=8), f)
    with pytest.raises(FileNotFoundError) as e:
        pipe.load(folder)
    assert str(e.value).endswith(f"{rrfp.checkpoint.part_name(5, m['token'])} and 2 more of its "
                                 "8 parts missing"), e.value


def test_a_damaged_file_is_named(tmp_path):
    # torch's, pickle's and json's own errors named neither the checkpoint nor the file.
    import os
    folder = str(tmp_path / "ck")
    pipe = pipeline(lm.chunks(2), pp=2)
    pipe.save(folder)
    name = rrfp.checkpoint.part_name(0, _manifest(folder)["token"])
    part = os.path.join(folder, name)
    with open(part, "rb") as f:
        data = f.read()
    other = str(tmp_path / "tensor.pt")
    torch.save(torch.zeros(2), other)
    with open(other, "rb") as f:
        a_tensor = f.read()
    for content, words in ((data[:len(data) // 2], "could not be read as a part"),
                           (b"", "could not be read"), (b"garbage", "could not be read"),
                           (a_tensor, "is not a part of a checkpoint")):
        with open(part, "wb") as f:
            f.write(content)
        with pytest.raises(ValueError, match=f"checkpoint '{folder}': {name} {words}") as e:
            pipe.load(folder)
        assert words == "is not a part of a checkpoint" or e.value.__cause__ is not None
    os.remove(part)
    with pytest.raises(FileNotFoundError, match=f"{name} of its 1 parts missing"):
        pipe.load(folder)
    for content in (b"", b'{"token": 1', b"\xff\xfe", b"[" * 70000):
        with open(os.path.join(folder, "manifest.json"), "wb") as f:
            f.write(content)
        with pytest.raises(ValueError, match=f"checkpoint '{folder}': manifest.json is"):
            pipe.load(folder)


def test_save_and_load_arguments_are_checked(tmp_path):
    import os
    pipe = pipeline(lm.chunks(2), pp=2)
    folder = str(tmp_path / "ck")
    # The checkpoint's own entry took the place of the user's, silently.
    with pytest.raises(ValueError, match="rrfp_seed_step: extra keys beginning with 'rrfp_'"):
        pipe.save(folder, rrfp_seed_step=123)
    assert not os.path.exists(folder)
    for call in (pipe.save, pipe.load):
        with pytest.raises(TypeError, match="path must be a folder's path .* got NoneType"):
            call(None)
        with pytest.raises(ValueError, match="path is empty"):
            call("")
    pipe.save(tmp_path / "as-a-path", step=1)  # os.PathLike
    assert pipe.load(tmp_path / "as-a-path") == {"step": 1}


def test_a_state_without_num_batches_tracked_loads_as_torch_loads_it():
    # torch's load_state_dict fills a norm layer's num_batches_tracked where a dict built by
    # hand lacks it; the check before loading counted it missing and refused the state.
    chunks = [nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)), nn.Linear(4, 4)]
    pipe = rrfp.Pipeline(chunks, lambda o, t: o.sum(), pp=2, microbatches=2)
    chunks[0][1].num_batches_tracked.fill_(5)
    state = {k: v.clone() for k, v in pipe.state_dict().items()
             if not k.endswith("num_batches_tracked")}
    pipe.load_state_dict(state)
    assert int(chunks[0][1].num_batches_tracked) == 0  # as torch starts it


def test_a_part_with_bytes_overwritten_is_refused_by_its_checksum(tmp_path):
    # 64 bytes of an AdamW moment overwritten loaded without a word, NaNs in the optimizer's
    # state. A part still reads with torch.load (the checksum is the archive's comment), and a
    # part without one (an earlier version's) loads as then.
    import os
    folder = str(tmp_path / "ck")
    pipe = pipeline(lm.chunks(2), pp=2)
    opt = adamw(pipe.chunks.values())
    train(pipe, opt, 0, 1)
    pipe.save(folder, opt, step=1)
    part = os.path.join(folder, rrfp.checkpoint.part_name(0, _manifest(folder)["token"]))
    with open(part, "rb") as f:
        data = f.read()
    assert torch.load(part)["extra"]["step"] == 1
    moment = max((s["exp_avg"] for s in opt.state.values()), key=lambda t: t.numel())
    at = data.find(moment.numpy().tobytes())
    assert at > 0 and moment.numel() * 4 >= 64
    with open(part, "r+b") as f:
        f.seek(at)
        f.write(b"\xff" * 64)
    name = os.path.basename(part)
    with pytest.raises(ValueError, match=f"checkpoint '{folder}': {name} is damaged"):
        pipe.load(folder, opt)
    digit = data.rindex(b"rrfp-sha256:") + len(b"rrfp-sha256:")  # the checksum itself
    with open(part, "wb") as f:
        f.write(data[:digit] + (b"1" if data[digit:digit + 1] != b"1" else b"2") +
                data[digit + 1:])
    with pytest.raises(ValueError, match=f"{name} is damaged"):
        pipe.load(folder, opt)
    # A damaged marker is damage too (it was taken for an earlier version's part, unchecked).
    damaged = bytearray(data)
    damaged[at:at + 64] = b"\xff" * 64
    damaged[data.rindex(b"rrfp-sha256:")] = ord("x")
    with open(part, "wb") as f:
        f.write(damaged)
    with pytest.raises(ValueError, match=f"{name} is damaged: the SHA-256 saved in it cannot"):
        pipe.load(folder, opt)
    torch.save(torch.load(part), part)  # as an earlier version wrote it: no checksum
    assert pipe.load(folder, opt) == {"step": 1}


class _Unblocking:
    """Opens the named pipe `fifo` for writing whenever a reader waits on it, so that a load
    blocked in its open() (as before) goes on and fails, rather than hang the suite."""

    def __init__(self, fifo):
        import threading
        self.fifo, self.done = fifo, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        import os
        while not self.done.wait(0.01):
            try:  # refused (ENXIO) while no reader has it open
                os.close(os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass

    def __enter__(self):
        self.thread.start()

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()


@pytest.mark.parametrize("manifest", [False, True], ids=["no-manifest", "named-by-manifest"])
def test_a_named_pipe_for_a_part_is_refused_not_waited_on(tmp_path, manifest):
    # A folder without a manifest whose part-0.pt was a named pipe: open() waited for a writer
    # for ever. Named by a manifest, it was called missing.
    import os
    import time
    folder = str(tmp_path / "ck")
    pipe = pipeline(lm.chunks(2), pp=2)
    if manifest:
        pipe.save(folder, step=1)
        name = rrfp.checkpoint.part_name(0, _manifest(folder)["token"])
        os.remove(os.path.join(folder, name))
    else:
        os.makedirs(folder)
        name = "part-0.pt"
    os.mkfifo(os.path.join(folder, name))
    start = time.monotonic()
    with _Unblocking(os.path.join(folder, name)):
        with pytest.raises(ValueError, match=f"checkpoint '{folder}': {name} is a named pipe, "
                                             "not a file"):
            pipe.load(folder)
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("kind", ["folder", "named-pipe", "link-to-nothing"])
def test_a_manifest_that_is_no_file_is_refused(tmp_path, kind):
    # Taken for no manifest, every part-*.pt was read: with the committed part of step 1 and
    # a later save's uncommitted part, the load returned step 2's.
    import os
    import shutil
    folder, later = str(tmp_path / "ck"), str(tmp_path / "later")
    pipe = pipeline(lm.chunks(2), pp=2)
    pipe.save(folder, step=1)
    pipe.save(later, step=2)
    uncommitted = rrfp.checkpoint.part_name(0, _manifest(later)["token"])
    shutil.copy(os.path.join(later, uncommitted), os.path.join(folder, uncommitted))
    manifest = os.path.join(folder, "manifest.json")
    os.remove(manifest)
    {"folder": os.mkdir, "named-pipe": os.mkfifo,
     "link-to-nothing": lambda m: os.symlink(m + ".gone", m)}[kind](manifest)
    words = {"folder": "a folder", "named-pipe": "a named pipe",
             "link-to-nothing": "a symbolic link to nothing"}[kind]
    with pytest.raises(ValueError, match=f"checkpoint '{folder}': manifest.json is {words}, "
                                         "not a file"):
        pipe.load(folder)


def test_a_file_for_the_folder_is_refused(tmp_path):
    # save() said "File exists", and load() "no part-*.pt in it", of a file named as the folder.
    file = str(tmp_path / "file")
    with open(file, "wb") as f:
        f.write(b"mine")
    pipe = pipeline(lm.chunks(2), pp=2)
    with pytest.raises(NotADirectoryError, match=f"save: '{file}' is a file, not a folder: a "
                                                 "checkpoint is a folder"):
        pipe.save(file, step=1)
    with pytest.raises(NotADirectoryError, match=f"checkpoint '{file}' is a file, not a folder: "
                                                 "a checkpoint is a folder"):
        pipe.load(file)
    with open(file, "rb") as f:
        assert f.read() == b"mine"
