"""Checkpoints of modules whose loading is their own: a module's state_dict carries torch's
version of each module, which some read when they load, and quantization's observers take a
saved statistic's shape. A pipeline's state_dict, save and load keep both, as torch's own
round trip does."""
import copy
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import rrfp

quantization = pytest.importorskip("torch.ao.quantization")


def loss_fn(y, t):
    return F.mse_loss(y, t)


def data():
    g = torch.Generator().manual_seed(3)
    return torch.randn(8, 4, generator=g), torch.randn(8, 4, generator=g)


class Observed(nn.Module):
    """A linear layer whose input an observer watches: the observer's eps is saved under its
    module's version 3, and an observer loaded as an older version resets it."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.obs = quantization.MinMaxObserver(eps=0.25)

    def forward(self, x):
        self.obs(x.detach())
        return self.lin(x)


class PerChannel(nn.Module):
    """A linear layer whose weight goes through per-channel fake quantization, whose scale
    starts with one element and takes a channel each once observed."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.fq = quantization.FakeQuantize(
            observer=quantization.MovingAveragePerChannelMinMaxObserver, quant_min=-128,
            quant_max=127, dtype=torch.qint8, qscheme=torch.per_channel_symmetric, ch_axis=0)

    def forward(self, x):
        return F.linear(x, self.fq(self.lin.weight), self.lin.bias)


def trained(make):
    torch.manual_seed(0)
    chunks = [make(), make()]
    pipe = rrfp.Pipeline(chunks, loss_fn, pp=2, microbatches=2, timeout=60)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the observers' own warnings
        pipe.step(*data())
    return chunks, pipe


def fresh(make):
    torch.manual_seed(1)
    chunks = [make(), make()]
    return chunks, rrfp.Pipeline(chunks, loss_fn, pp=2, microbatches=2, timeout=60)


def states(chunks):
    return [{k: v.clone() if torch.is_tensor(v) else copy.deepcopy(v)
             for k, v in c.state_dict().items()} for c in chunks]


def same(x, y):
    return torch.equal(x, y) if torch.is_tensor(x) else x == y


def same_states(a, b):
    return len(a) == len(b) and all(
        x.keys() == y.keys() and all(same(x[k], y[k]) for k in x) for x, y in zip(a, b))


@pytest.mark.parametrize("how", ["state_dict", "save"])
def test_a_module_loads_by_the_version_it_was_saved_under(tmp_path, how):
    chunks, pipe = trained(Observed)
    assert chunks[0].obs.eps.item() == 0.25
    want = states(chunks)
    qparams = chunks[0].obs.calculate_qparams()
    got, again = fresh(Observed)
    if how == "save":
        pipe.save(tmp_path / "ck")
        again.load(tmp_path / "ck")
    else:
        again.load_state_dict(pipe.state_dict())
    # Loaded without its version, the observer took eps back to float32's (1.19e-07) and its
    # quantization parameters with it.
    assert same_states(states(got), want)
    assert all(torch.equal(a, b) for a, b in zip(got[0].obs.calculate_qparams(), qparams))


@pytest.mark.parametrize("how", ["state_dict", "save"])
def test_per_channel_statistics_load_into_a_model_not_yet_observed(tmp_path, how):
    chunks, pipe = trained(PerChannel)
    assert chunks[0].fq.scale.shape == (4,)
    got, again = fresh(PerChannel)
    assert got[0].fq.scale.shape == (1,)  # was refused: "has shape [4], the chunk's [1]"
    if how == "save":
        pipe.save(tmp_path / "ck")
        again.load(tmp_path / "ck")
    else:
        again.load_state_dict(pipe.state_dict())
    assert same_states(states(got), states(chunks))


def test_another_shape_is_still_refused_where_torch_would_not_take_it():
    _, pipe = trained(Observed)
    state = pipe.state_dict()
    state["0.lin.weight"] = torch.zeros(4, 5)
    _, again = fresh(Observed)
    with pytest.raises(ValueError,
                       match=r"'0.lin.weight' has shape \[4, 5\], the chunk's \[4, 4\]"):
        again.load_state_dict(state)


class Configured(nn.Module):
    """Saves its configuration as extra state and refuses another one on load: code of the
    user's that runs inside the load, where no check before it can tell."""

    def __init__(self, tag):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.tag = tag

    def forward(self, x):
        return self.lin(x)

    def get_extra_state(self):
        return {"tag": self.tag}

    def set_extra_state(self, state):
        if state["tag"] != self.tag:
            raise ValueError(f"saved with {state['tag']}, this model has {self.tag}")


@pytest.mark.parametrize("how", ["state_dict", "save"])
def test_a_load_that_a_modules_own_code_refuses_changes_nothing(tmp_path, how):
    def made(tag, seed):
        torch.manual_seed(seed)
        chunks = [nn.Linear(4, 4), Configured(tag)]
        opt = torch.optim.SGD([p for c in chunks for p in c.parameters()], lr=0.1, momentum=0.9)
        return chunks, rrfp.Pipeline(chunks, loss_fn, pp=2, microbatches=2, timeout=60), opt

    chunks, pipe, opt = made("a", 0)
    pipe.step(*data())
    opt.step()
    got, again, opt2 = made("b", 1)
    again.step(*data())
    opt2.step()
    before, momentum = states(got), [s["momentum_buffer"].clone() for s in opt2.state.values()]
    # Chunk 0 and the optimizer were loaded before chunk 1's set_extra_state raised.
    with pytest.raises(ValueError, match="saved with a, this model has b"):
        if how == "save":
            pipe.save(tmp_path / "ck", opt)
            again.load(tmp_path / "ck", opt2)
        else:
            again.load_state_dict(pipe.state_dict())
    assert same_states(states(got), before)
    assert all(torch.equal(s["momentum_buffer"], m)
               for s, m in zip(opt2.state.values(), momentum))


def test_an_observer_entry_torch_does_not_resize_keeps_its_shape_check():
    # Only the statistics, scale and zero point take the saved shape: another shape for the
    # observer's eps raised in torch's load, after the chunks before it had been loaded.
    chunks, pipe = trained(Observed)
    state = pipe.state_dict()
    state["0.lin.weight"] = state["0.lin.weight"] + 1
    state["1.obs.eps"] = torch.ones(3)
    before = states(chunks)
    with pytest.raises(ValueError, match=r"'1.obs.eps' has shape \[3\], the chunk's \[1\]"):
        pipe.load_state_dict(state)
    assert same_states(states(chunks), before)


class Renamed(nn.Module):
    """A scale once named `gamma`, now `weight`: its load pre-hook migrates the old name."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.weight = nn.Parameter(torch.ones(4))
        self._register_load_state_dict_pre_hook(self._migrate)

    def _migrate(self, state, prefix, *rest):
        if prefix + "gamma" in state:
            state[prefix + "weight"] = state.pop(prefix + "gamma")

    def forward(self, x):
        return self.lin(x) * self.weight


class Old(nn.Module):
    """Renamed as it was: its scale named `gamma`."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.gamma = nn.Parameter(torch.ones(4))

    def forward(self, x):
        return self.lin(x) * self.gamma


def test_a_load_pre_hooks_renaming_is_taken_as_torch_takes_it():
    # The names were compared before the hooks had run: an earlier version's state, which
    # torch's load_state_dict takes, was refused as strict and reported wrong keys when not.
    chunks, pipe = trained(Renamed)
    old = {k.replace(".weight", ".gamma") if k.count(".") == 1 else k: v.clone() + 1
           for k, v in pipe.state_dict().items()}
    assert "1.gamma" in old and "1.weight" not in old
    assert pipe.load_state_dict(old) == ([], [])
    assert torch.equal(chunks[1].weight, old["1.gamma"])
    assert torch.equal(chunks[0].lin.bias, old["0.lin.bias"])
    # Not strict, what the hooks did not rename is reported by its full name, as torch does.
    partial = {k: v for k, v in old.items() if k != "1.gamma"}
    partial["1.extra"] = torch.zeros(1)
    assert pipe.load_state_dict(partial, strict=False) == (["1.weight"], ["1.extra"])
    # Strict, the same state is refused after the hooks ran, and nothing is loaded.
    before = states(chunks)
    with pytest.raises(KeyError, match=r"chunk 1: missing \[weight\], unexpected \[extra\]"):
        pipe.load_state_dict({**partial, "0.lin.bias": torch.full((4,), 9.0)})
    assert same_states(states(chunks), before)


def test_an_entry_a_pre_hook_renames_keeps_the_dtype_and_shape_checks():
    # Under its old name it matched nothing of the chunk's: a float64 entry was cast to the
    # chunk's float32 by torch's copy, silently, where under its new name it is refused.
    chunks, pipe = trained(Renamed)
    old = {k.replace(".weight", ".gamma") if k.count(".") == 1 else k: v.clone() + 1
           for k, v in pipe.state_dict().items()}
    before = states(chunks)
    for value, words in ((old["1.gamma"].double(), "is torch.float64, the chunk's torch.float32"),
                         (torch.ones(5), r"has shape \[5\], the chunk's \[4\]")):
        with pytest.raises(ValueError, match=f"chunk 1: '1.weight' {words}.*pre-hooks"):
            pipe.load_state_dict({**old, "1.gamma": value})
        assert same_states(states(chunks), before)
    # The hooks of rrfp's are gone after the load: the chunk's own hooks alone remain.
    assert pipe.load_state_dict(old) == ([], [])
    assert [len(m._load_state_dict_pre_hooks) for m in chunks[1].modules()] == [1, 0]


def test_a_checkpoint_of_the_earlier_version_loads_through_its_pre_hook(tmp_path):
    # load() is strict: the earlier version's checkpoint could not be resumed at all.
    old_chunks, old = trained(Old)
    old.save(str(tmp_path / "ck"), step=4)
    new_chunks = [Renamed(), Renamed()]
    new = rrfp.Pipeline(new_chunks, loss_fn, pp=2, microbatches=2, timeout=60)
    assert new.load(str(tmp_path / "ck")) == {"step": 4}
    for o, n in zip(old_chunks, new_chunks):
        assert torch.equal(n.weight, o.gamma) and torch.equal(n.lin.weight, o.lin.weight)


@pytest.mark.parametrize("kind", ["sparse", "meta"])
def test_an_entry_of_no_values_or_another_layout_is_refused_before_loading(kind):
    # They passed the shape and dtype checks, and torch's copy refused them partway through
    # the load: chunk 0 already overwritten, and its error named "Sequential" and "0.weight".
    chunks, pipe = trained(lambda: nn.Sequential(nn.Linear(4, 4)))
    state = {k: torch.full_like(v, 7.0) for k, v in pipe.state_dict().items()}
    w = state["1.0.weight"]
    state["1.0.weight"] = w.to_sparse() if kind == "sparse" else torch.empty_like(w, device="meta")
    before = states(chunks)
    words = "torch.sparse_coo, the chunk's torch.strided" if kind == "sparse" else \
        "on the meta device"
    with pytest.raises(ValueError, match=f"chunk 1: '1.0.weight' is {words}"):
        pipe.load_state_dict(state)
    assert same_states(states(chunks), before)
