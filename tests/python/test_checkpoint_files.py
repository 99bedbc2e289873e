"""A pipeline's checkpoint folder as files: a manifest's fields checked before use, missing or
damaged parts named, arguments checked, bytes overwritten caught by their checksum, and named
pipes, folders and dangling links refused, never waited on. test_checkpoint.py, whose
helpers these share, checks what a checkpoint holds and that training on from it is bitwise
training on without the stop."""
import os

import pytest
import torch
from torch import nn

import lm
import rrfp
from test_checkpoint import _manifest, adamw, pipeline, train

_SUM_BYTES = len(b"rrfp-sha256:") + 64  # a sealed part's archive comment


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
    # A key given twice: json.loads kept the last without a word.
    with open(f"{folder}/manifest.json", "w") as f:
        f.write(f'{{"token": {m["token"]}, "parts": 2, "parts": 1}}')
    with pytest.raises(ValueError, match="manifest.json is not a manifest .*key 'parts' appears "
                                         "twice in one object"):
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
    # So is a byte dropped from the end-of-archive record (its comment's length), or one added
    # within it: the record no longer parses, and the data's damage loaded unchecked.
    for cut in (-_SUM_BYTES - 3, -_SUM_BYTES - 10):
        damaged = bytearray(data)
        damaged[at:at + 64] = b"\xff" * 64
        if cut == -_SUM_BYTES - 3:
            del damaged[cut]
        else:
            damaged[cut:cut] = b"\0"
        with open(part, "wb") as f:
            f.write(damaged)
        with pytest.raises(ValueError, match=f"{name} is damaged: the SHA-256 saved in it "
                                             f"cannot"):
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


def test_parts_of_saves_without_their_manifest_are_refused(tmp_path):
    # Parts of two saves copied into a folder without a manifest were merged, the part that
    # sorted last winning: step 1's weights loaded without a word where step 5's were meant.
    import shutil
    torch.manual_seed(0)
    pipe = pipeline(lm.chunks(2), pp=2)
    first, later, mixed = (str(tmp_path / n) for n in ("first", "later", "mixed"))
    pipe.save(first, step=1)
    pipe.save(later, step=5)
    os.makedirs(mixed)
    for folder in (first, later):
        name = rrfp.checkpoint.part_name(0, _manifest(folder)["token"])
        shutil.copy(os.path.join(folder, name), os.path.join(mixed, name))
    params = [p for c in pipe.chunks.values() for p in c.parameters()]
    before = [p.detach().clone() for p in params]
    with pytest.raises(ValueError, match=f"checkpoint '{mixed}': part-0\\.[0-9a-f]{{12}}\\.pt, "
                                         "part-0\\.[0-9a-f]{12}\\.pt without the manifest.json "
                                         "that commits its save"):
        pipe.load(mixed)
    assert all(torch.equal(a, b) for a, b in zip(before, params))
    # One save's part alone, its manifest removed: refused too (its save is not known to have
    # committed).
    os.remove(os.path.join(first, "manifest.json"))
    with pytest.raises(ValueError, match="without the manifest.json that commits its save"):
        pipe.load(first)
    # Beside a checkpoint of an earlier version (a part without a token), the refusal says that
    # without the unfinished save's parts that checkpoint loads; and it does.
    old = str(tmp_path / "old")
    os.makedirs(old)
    name = rrfp.checkpoint.part_name(0, _manifest(later)["token"])
    shutil.copy(os.path.join(later, name), os.path.join(old, "part-0.pt"))
    shutil.copy(os.path.join(later, name), os.path.join(old, name))
    with pytest.raises(ValueError, match="without them the folder's earlier checkpoint "
                                         "\\(part-0.pt\\) loads"):
        pipe.load(old)
    os.remove(os.path.join(old, name))
    assert pipe.load(old)["step"] == 5


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


def test_a_folder_named_like_a_pattern_touches_no_other_folder(tmp_path):
    # `run[1]` was taken as a pattern: its save removed the parts of `run1` (which then no
    # longer loaded) and never its own earlier ones; a load of a missing `run[1]` read run1's.
    pipe = pipeline(lm.chunks(2), pp=2)
    plain, bracketed = str(tmp_path / "run1"), str(tmp_path / "run[1]")
    pipe.save(plain, step=1)
    for s in (2, 3):
        pipe.save(bracketed, step=s)
    assert pipe.load(plain) == {"step": 1}
    assert len([f for f in os.listdir(bracketed) if f.startswith("part-")]) == 1
    with pytest.raises(FileNotFoundError, match=r"run\[2\]': no such folder"):
        pipe.load(str(tmp_path / "run[2]"))
