"""What a c10d pipeline's process tells torch.distributed's store, and reads of the others (its
script's end, a pipeline freed), ends within 2 s however the store answers: outside torchrun the
store lives in global rank 0's process, and where that process is stopped or hung a call on it
blocks whatever its timeout (set_timeout left an add() waiting over a minute), so a process hung
after raising its step's TimeoutError, and one waiting in a call's gather hung without one."""
import threading
import time

import pytest

from rrfp import _ended


class HungStore:
    """A store whose host stopped answering: every call blocks until released."""

    def __init__(self):
        self.release = threading.Event()
        self.calls = 0

    def set_timeout(self, timeout):  # taken, and no help: the host does not answer
        pass

    def add(self, key, value):
        self.calls += 1
        self.release.wait(60)
        return 0


def test_a_hung_store_bounds_every_call(monkeypatch):
    store = HungStore()
    monkeypatch.setattr(_ended, "_store", lambda: (store, 1, 2))
    monkeypatch.setattr(_ended, "_built", [True])
    try:
        for call, want in ((_ended.note_end, None), (_ended.note_freed, None),
                           (_ended.gone, ("", False))):
            began = time.monotonic()
            assert call() == want
            assert time.monotonic() - began < 2 + 1.5, call.__name__
        assert store.calls == 3  # each asked the store, none waited past its bound
    finally:
        store.release.set()


class AnsweringStore:
    def __init__(self, keys):
        self.keys = dict(keys)

    def add(self, key, value):
        self.keys[key] = self.keys.get(key, 0) + value
        return self.keys[key]


def test_an_answering_store_is_read_as_before(monkeypatch):
    store = AnsweringStore({"rrfp/ended/0": 1, "rrfp/freed/2": 1})
    monkeypatch.setattr(_ended, "_store", lambda: (store, 1, 3))
    monkeypatch.setattr(_ended, "_freed", [0])
    assert _ended.gone() == ("the script of global rank(s) [0] had ended; global rank(s) [2] had "
                             "freed a Pipeline this process still uses (no longer referenced, as a "
                             "local of a function that returned)", True)
    monkeypatch.setattr(_ended, "_built", [True])
    monkeypatch.setattr(_ended, "_entered", [3])
    _ended.note_end()
    assert store.keys["rrfp/ended/1"] == 4  # the gathers it came to, plus one


def test_a_process_that_never_came_to_the_gather_is_named_alone(monkeypatch):
    # pp 2 x dp 2: rank 1's script ended after 3 gathers; ranks 0 and 3 came to the 4th with
    # rank 2, failed in it for want of rank 1, and ended. Rank 2 named all three.
    # Rank 0's pipeline was freed as its script ended: not a pipeline freed ahead of this one.
    store = AnsweringStore({"rrfp/ended/1": 4, "rrfp/ended/0": 5, "rrfp/ended/3": 5,
                            "rrfp/freed/0": 1, "rrfp/last-freed/0": _ended.BUILT})
    monkeypatch.setattr(_ended, "_store", lambda: (store, 2, 4))
    monkeypatch.setattr(_ended, "_freed", [0])
    monkeypatch.setattr(_ended, "_entered", [4])
    assert _ended.gone() == ("the script of global rank(s) [1] had ended", True)
    # Where every one that ended came to it, they are named all the same.
    del store.keys["rrfp/ended/1"]
    assert _ended.gone() == ("the script of global rank(s) [0, 3] had ended", True)


def test_a_process_that_refused_a_pipeline_on_its_own_is_named_so(monkeypatch):
    # Rank 2 refused an option on its own once the groups were made: counted as a pipeline freed
    # alone, it was told as one that "had freed a Pipeline this process still uses". Rank 0,
    # whose building then failed in its gather, is left out; once rank 2 frees a pipeline it had
    # built, it is told as such (a count of refusals would name it a refuser again).
    store = AnsweringStore({})
    monkeypatch.setattr(_ended, "_freed", [0])
    monkeypatch.setattr(_ended, "_store", lambda: (store, 2, 3))
    _ended.note_freed(_ended.REFUSED)
    monkeypatch.setattr(_ended, "_store", lambda: (store, 0, 3))
    _ended.note_freed(_ended.FAILED)
    assert store.keys == {"rrfp/freed/2": 1, "rrfp/last-freed/2": 1, "rrfp/freed/0": 1,
                          "rrfp/last-freed/0": 2}
    monkeypatch.setattr(_ended, "_store", lambda: (store, 1, 3))
    monkeypatch.setattr(_ended, "_freed", [0])
    assert _ended.gone() == ("global rank(s) [2] refused, on its own, the Pipeline being built "
                             "(its error is in that process's output)", True)
    monkeypatch.setattr(_ended, "_freed", [1])  # past it
    assert _ended.gone() == ("", False)
    monkeypatch.setattr(_ended, "_store", lambda: (store, 2, 3))
    _ended.note_freed()
    monkeypatch.setattr(_ended, "_store", lambda: (store, 1, 3))
    monkeypatch.setattr(_ended, "_freed", [1])
    assert _ended.gone()[0].startswith("global rank(s) [2] had freed a Pipeline this process still")


def test_processes_that_ended_on_an_error_are_not_told_as_calls_that_differ(monkeypatch):
    # pp 2 x dp 2: rank 3 was killed mid-step (os._exit: no word); ranks 1 and 2 failed in that
    # step and their scripts ended on the error. Rank 0, at its next gather, said "the script of
    # global rank(s) [1, 2] had ended ... every process must make the pipeline's calls alike".
    store = AnsweringStore({"rrfp/ended/1": 3, "rrfp/ended/2": 3})
    monkeypatch.setattr(_ended, "_built", [True])
    monkeypatch.setattr(_ended, "_freed", [0])
    monkeypatch.setattr(_ended, "_entered", [2])
    for rank in (1, 2):  # each one's last call raised, then its script ended
        monkeypatch.setattr(_ended, "_store", lambda rank=rank: (store, rank, 4))
        _ended.call_ended(True)
        _ended.note_end()
    assert store.keys["rrfp/raised/1"] == 1 and store.keys["rrfp/raised/2"] == 1
    monkeypatch.setattr(_ended, "_store", lambda: (store, 0, 4))
    assert _ended.gone() == (
        "the script of global rank(s) [1, 2] had ended after a call of its pipeline raised (its "
        "error is in that process's output); global rank(s) [3] said nothing (still running, or "
        "ended without a word: killed, out of memory, os._exit)", False)
    # A call that raised, then one that did not: a script that ran out is told as before.
    store = AnsweringStore({})
    monkeypatch.setattr(_ended, "_store", lambda: (store, 3, 4))
    _ended.call_ended(True)
    _ended.call_ended(False)
    _ended.note_end()
    assert "rrfp/raised/3" not in store.keys
    monkeypatch.setattr(_ended, "_store", lambda: (store, 0, 4))
    assert _ended.gone() == ("the script of global rank(s) [3] had ended", True)


def test_a_call_that_raised_is_marked_until_one_returns():
    # The mark note_end writes comes from the pipeline's own calls (_live.hold).
    import rrfp
    import torch
    pipe = rrfp.Pipeline([torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)],
                         lambda o, y: o.sum(), pp=2, microbatches=2, timeout=30)
    try:
        with torch.no_grad():
            pipe.step(torch.randn(4, 2), torch.randn(4, 2))
    except RuntimeError as e:
        assert "step: called under torch.no_grad()" in str(e)
    assert _ended._last_raised == [True]
    pipe.step(torch.randn(4, 2), torch.randn(4, 2))
    assert _ended._last_raised == [False]
    # An argument refused is the caller's mistake, not a failure that ends a job.
    with pytest.raises(RuntimeError):
        with torch.no_grad():
            pipe.step(torch.randn(4, 2), torch.randn(4, 2))
    with pytest.raises(ValueError, match="inputs and targets: 4 and 3 rows"):
        pipe.step(torch.randn(4, 2), torch.randn(3, 2))
    assert _ended._last_raised == [False]
