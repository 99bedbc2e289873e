"""Each process's own `extra` back from Pipeline.load (rrfp/_extras.py): the one it saved under
the same layout; under another, the saved extras when they are all the same, and a refusal
when they differ. With a process per stage, tests/python/mp_checkpoint.py saves and loads them
for real; here a part is edited to hold two processes' extras, as a job of two would write."""
import glob

import pytest
import torch

import lm
import rrfp
from rrfp import _extras


def threads(n=2):
    return rrfp.Pipeline(lm.chunks(n), lm.loss_fn, pp=n, microbatches=2, transport="inproc",
                         timeout=60)


def two_processes(path, first, second, layout):
    """Edits the checkpoint in `path` (one part) as if processes 0 and 1 of a job of `layout`
    ([processes, dp]) had saved `first` and `second`."""
    (part_file,) = glob.glob(str(path / "part-*.pt"))
    part = torch.load(part_file)
    part["extras"] = {0: _extras.serialized(first), 1: _extras.serialized(second)}
    part["layout"] = layout
    torch.save(part, part_file)


def test_threads_get_back_what_they_saved(tmp_path):
    pipe = threads()
    pipe.save(tmp_path, step=3, where=torch.arange(4), name="a")
    got = pipe.load(tmp_path)
    assert got.keys() == {"step", "where", "name"} and got["step"] == 3
    assert torch.equal(got["where"], torch.arange(4)) and got["name"] == "a"


def test_each_process_of_the_same_layout_gets_its_own():
    saved = {0: _extras.serialized({"pos": 0}), 1: _extras.serialized({"pos": 1})}
    for rank in (0, 1):
        assert _extras.own_extra("ckpt", saved, [[2, 1]], rank, [2, 1], {}) == {"pos": rank}


@pytest.mark.parametrize("same", [True, False])
def test_another_layout_gets_extras_saved_alike_and_refuses_others(tmp_path, same):
    pipe = threads()
    pipe.save(tmp_path, step=3)
    second = {"step": 3, "t": torch.ones(2)} if same else {"step": 3, "t": torch.zeros(2)}
    two_processes(tmp_path, {"step": 3, "t": torch.ones(2)}, second, [4, 2])
    before = [p.detach().clone() for p in pipe.chunks[0].parameters()]
    for p in pipe.chunks[0].parameters():
        p.data.add_(1)
    if same:
        got = threads().load(tmp_path)
        assert got["step"] == 3 and torch.equal(got["t"], torch.ones(2))
        return
    with pytest.raises(ValueError) as e:
        pipe.load(tmp_path)
    assert ("saved different extras (process 0's and process 1's differ), and it was saved by 4 "
            "process(es) with dp=2, where this job has 1 with dp=1") in str(e.value)
    assert not any(torch.equal(a, b) for a, b in zip(before, pipe.chunks[0].parameters())), \
        "a refused load loaded the chunks"


def test_a_checkpoint_of_an_earlier_version_gives_its_first_parts_extra():
    assert _extras.own_extra("ckpt", {}, [], 1, [2, 1], {"step": 5}) == {"step": 5}


def test_damaged_extras_are_refused_naming_the_file(tmp_path):
    pipe = threads()
    pipe.save(tmp_path, step=3)
    (part_file,) = glob.glob(str(tmp_path / "part-*.pt"))
    part = torch.load(part_file)
    part["extras"] = {0: "not bytes"}
    torch.save(part, part_file)
    with pytest.raises(ValueError, match="is not a part of a checkpoint"):
        pipe.load(tmp_path)


def test_extras_are_compared_by_value():
    assert _extras.same({"a": torch.arange(3), "b": [1, (2, "x")]},
                        {"b": [1, (2, "x")], "a": torch.arange(3)})
    assert not _extras.same({"a": torch.arange(3)}, {"a": torch.arange(3).double()})
    assert not _extras.same({"a": [1, 2]}, {"a": (1, 2)})
    assert not _extras.same({"a": 1}, {"a": 1, "b": 2})
