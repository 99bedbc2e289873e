"""What a c10d pipeline's process tells torch.distributed's store, and reads of the others (its
script's end, a pipeline freed), ends within 2 s however the store answers: outside torchrun the
store lives in global rank 0's process, and where that process is stopped or hung a call on it
blocks whatever its timeout (set_timeout left an add() waiting over a minute), so a process hung
after raising its step's TimeoutError, and one waiting in a call's gather hung without one."""
import threading
import time

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
                           (_ended.gone, "")):
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
                             "local of a function that returned)")
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
    assert _ended.gone() == "the script of global rank(s) [1] had ended"
    # Where every one that ended came to it, they are named all the same.
    del store.keys["rrfp/ended/1"]
    assert _ended.gone() == "the script of global rank(s) [0, 3] had ended"


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
                             "(its error is in that process's output)")
    monkeypatch.setattr(_ended, "_freed", [1])  # past it
    assert _ended.gone() == ""
    monkeypatch.setattr(_ended, "_store", lambda: (store, 2, 3))
    _ended.note_freed()
    monkeypatch.setattr(_ended, "_store", lambda: (store, 1, 3))
    monkeypatch.setattr(_ended, "_freed", [1])
    assert _ended.gone().startswith("global rank(s) [2] had freed a Pipeline this process still")
