"""A checkpoint's optimizer state loads group by group, each param group matched to the saved
groups by its parameters' names (layouts cut groups differently), and refused where that match
would give a parameter hyper-parameters it was not saved with."""
import pytest
import torch
from torch import nn

import rrfp


@pytest.mark.parametrize("head_first", [True, False], ids=["head+body", "body+head"])
def test_optimizer_groups_are_matched_by_every_parameter(tmp_path, head_first):
    # Each group took the saved group of its first parameter alone: head+body loaded the
    # head's lr for the body too, with no state for it; body+head raised a KeyError.
    torch.manual_seed(0)
    chunks = [nn.Linear(8, 8), nn.Linear(8, 4)]
    pipe = rrfp.Pipeline(chunks, nn.functional.mse_loss, pp=2, microbatches=2,
                         transport="inproc", progress=None)
    body, head = (list(c.parameters()) for c in chunks)
    both = head + body if head_first else body + head
    pipe.step(torch.randn(4, 8), torch.randn(4, 4))

    def saved(groups, name):
        opt = torch.optim.Adam(groups)
        opt.step()
        pipe.save(str(tmp_path / name), opt)
        return str(tmp_path / name)

    def refused(folder, groups, words):
        opt = torch.optim.Adam(groups, lr=5e-2)
        with pytest.raises(ValueError, match=words):
            pipe.load(folder, opt)
        assert not opt.state and all(g["lr"] == 5e-2 for g in opt.param_groups)

    refused(saved(head, "head"), both, "param group 0 holds parameters the checkpoint's "
            "optimizer did not hold: '0.weight', '0.bias'; .*add_param_group")
    two = saved([{"params": head, "lr": 1e-3}, {"params": body, "lr": 1e-2}], "two")
    mixed = [("'1.weight'", "0.001"), ("'0.weight'", "0.01")][::1 if head_first else -1]
    refused(two, both, "param group 0 mixes parameters of saved groups whose hyper-parameters "
            "differ: {} was saved with lr={}, {} with lr={};".format(*mixed[0], *mixed[1]))
    refused(two, [{"params": body[:1] + head}, {"params": body[1:]}], "param group 0 mixes")
    # Groups holding each saved group's parameters load, in any order.
    opt = torch.optim.Adam([{"params": body}, {"params": head}], lr=5e-2)
    pipe.load(two, opt)
    assert [g["lr"] for g in opt.param_groups] == [1e-2, 1e-3] and len(opt.state) == 4
    opt = torch.optim.Adam(both, lr=5e-2)
    pipe.load(saved(both[::-1], "reversed"), opt)
    assert opt.param_groups[0]["lr"] == 1e-3 and len(opt.state) == 4
    # One group over saved groups alike, as a save by a process per stage writes one in each
    # part, loads: their lr and every parameter's state.
    alike = saved([{"params": head, "lr": 1e-3}, {"params": body, "lr": 1e-3}], "alike")
    opt = torch.optim.Adam(both, lr=5e-2)
    pipe.load(alike, opt)
    assert opt.param_groups[0]["lr"] == 1e-3 and len(opt.state) == 4


@pytest.mark.parametrize("saved_as,loaded_as", [("SGD", "Adam"), ("Adam", "SGD"),
                                                ("AdamW", "Adam")])
def test_another_optimizer_type_is_refused_naming_both(tmp_path, saved_as, loaded_as):
    # SGD's state into an Adam failed in torch with a bare KeyError: 'step'; Adam's into an SGD
    # loaded and failed at the first step; AdamW's into an Adam took its weight_decay as L2.
    torch.manual_seed(0)
    chunks = [nn.Linear(8, 8), nn.Linear(8, 4)]
    pipe = rrfp.Pipeline(chunks, nn.functional.mse_loss, pp=2, microbatches=2,
                         transport="inproc", progress=None)
    params = [p for c in chunks for p in c.parameters()]
    pipe.step(torch.randn(4, 8), torch.randn(4, 4))
    make = {"SGD": lambda: torch.optim.SGD(params, lr=0.1, momentum=0.9),
            "Adam": lambda: torch.optim.Adam(params, lr=0.1),
            "AdamW": lambda: torch.optim.AdamW(params, lr=0.1, weight_decay=0.5)}
    opt = make[saved_as]()
    opt.step()
    pipe.save(str(tmp_path / "ck"), opt)
    other = make[loaded_as]()
    before = [dict(g) for g in other.param_groups]
    with pytest.raises(ValueError, match=f"optimizer: the checkpoint holds the state of a "
                                         f"torch.optim.*{saved_as}, this optimizer is a "
                                         f"torch.optim.*{loaded_as}: load it into an? {saved_as}"):
        pipe.load(str(tmp_path / "ck"), other)
    assert not other.state and [dict(g) for g in other.param_groups] == before
    same = make[saved_as]()
    pipe.load(str(tmp_path / "ck"), same)
    assert len(same.state) == len(params)
