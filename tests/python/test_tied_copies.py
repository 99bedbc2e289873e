"""Ties declared with `tied=` between parameters that are distinct objects: what a chunk_fn
builds when the first chunk's embedding and the last chunk's output projection are one
parameter, in threads here (mp_tied.py runs the same tie across processes). Each copy gets the
sum of the copies' own sums, added in chunk order, after construction made the copies equal.
The reference is a plain loop over the model with the tie cut (mp_tied.reference). Malformed
ties and copies that cannot be one parameter are refused, naming the tie."""
import copy

import pytest
import torch

import lm
import mp_tied
import rrfp
import test_tied
from rrfp._ties import values_print

PP, M = 4, 4
TIE = [["0.0.tok.weight", f"{PP - 1}.1.embed.weight"]]


def apart(i, shift=1.0):
    """Chunk i of the tied GPT with the tie cut; the head's copy starts `shift` away."""
    chunks = test_tied.tied_gpt(PP)
    head = chunks[-1][-1]
    head.embed = copy.deepcopy(head.embed)
    with torch.no_grad():
        head.embed.weight.add_(shift)
    return chunks[i]


def pipeline(build=apart, tied=TIE, shift=1.0, **kw):
    return rrfp.Pipeline(lambda i: build(i, shift) if build is apart else build(i), lm.loss_fn,
                         pp=PP, microbatches=M, tied=tied, **kw)


@pytest.mark.parametrize("hint,policy,split", [("1f1b", "fixed", "off"), ("bf", "ready", "off"),
                                               ("bfw", "ready", "on")])
def test_declared_tie_gets_the_copies_sum(hint, policy, split):
    ref, ref_opt, ref_tie = mp_tied.reference(PP, 1, M)
    pipe = pipeline(hint=hint, policy=policy, split_backward=split,
                    delay_fn=test_tied.delays(7))
    chunks = [pipe.chunks[c] for c in range(PP)]
    first, last = chunks[0][0].tok.weight, chunks[-1][-1].embed.weight
    assert first is not last and torch.equal(first, last)  # made equal at construction
    opt = mp_tied.sgd(test_tied.unique_params(chunks))
    mp_tied.train(pipe, opt, M)
    mp_tied.same(ref, chunks, range(PP), f"declared tie, {hint}")
    mp_tied.same_momentum(opt, ref_opt, last, ref_tie, "declared tie's momentum")


def test_declared_tie_adds_onto_existing_grad():
    # No zero_grad: the step's tie sum goes onto the .grad each copy had, as other gradients do.
    pipe = pipeline()
    chunks = [pipe.chunks[c] for c in range(PP)]
    first, last = chunks[0][0].tok.weight, chunks[-1][-1].embed.weight
    xs, ys = lm.batches(M, seed=0)
    pipe.step(xs, ys)
    once = first.grad.clone()
    pipe.step(xs, ys)
    assert torch.equal(first.grad, once + once) and torch.equal(last.grad, first.grad)
    assert first.grad is not last.grad  # each copy its own tensor


def test_one_object_needs_no_tie():
    # Names of one parameter in one process: GradSums already adds its uses exactly.
    pipe = rrfp.Pipeline(test_tied.tied_gpt(PP), lm.loss_fn, pp=PP, microbatches=M, tied=TIE)
    assert pipe._ties is None


def frozen_copy(i):
    c = apart(i)
    if i == PP - 1:
        c[-1].embed.weight.requires_grad_(False)
    return c


@pytest.mark.parametrize("kw,error,words", [
    ({"tied": "0.0.tok.weight"}, TypeError, ["a list of ties"]),
    ({"tied": [["0.0.tok.weight"]]}, ValueError, ["at least two"]),
    ({"tied": [[0, 1]]}, TypeError, ["each name is a str", "int 0"]),
    ({"tied": [["9.tok.weight", "0.0.tok.weight"]]}, ValueError, ["'9.tok.weight'", "0..3"]),
    ({"tied": [["0.0.tok.weight", "3.1.embed.weight", "0.0.tok.weight"]]}, ValueError,
     ["named twice"]),
    # chunk 0's parameter under a second spelling; a digit int() does not read
    ({"tied": [["0.0.tok.weight", "00.0.tok.weight"]]}, ValueError,
     ["'00.0.tok.weight'", "no leading zeros"]),
    ({"tied": [["\u00b2.0.tok.weight", "3.1.embed.weight"]]}, ValueError, ["0..3"]),
    ({"tied": [["0.0.tok.weight", "3.1.nothing"]]}, ValueError,
     ["chunk 3 has no parameter '1.nothing'"]),
    ({"tied": [["0.0.tok.weight", "1.0.ln1.weight"]]}, ValueError,
     ["cannot be one parameter", "'0.0.tok.weight' ((64, 32)"]),
])
def test_bad_ties_are_refused(kw, error, words):
    with pytest.raises(error) as e:
        pipeline(**kw)
    assert all(w in str(e.value) for w in words), e.value


def test_a_tie_frozen_in_one_copy_is_refused():
    pipe = pipeline(frozen_copy)
    with pytest.raises(ValueError, match=r"frozen in others \(3.1.embed.weight\)"):
        pipe.step(*lm.batches(M, seed=0))
    assert all(p.grad is None for c in pipe.chunks.values() for p in c.parameters())


@pytest.mark.parametrize("change", ["decay", "in place", "bf16", "eval"])
def test_copies_that_drifted_apart_are_refused(change):
    # Copies stepped apart (weight decay on the head's copy alone, as a model's usual groups
    # give a Linear's weight and not an Embedding's) or changed on one side trained on, each
    # copy with its own values, silently.
    dtype = torch.bfloat16 if change == "bf16" else torch.float32
    pipe = pipeline()
    for c in pipe.chunks.values():
        c.to(dtype)
    chunks = [pipe.chunks[c] for c in range(PP)]
    first, last = chunks[0][0].tok.weight, chunks[-1][-1].embed.weight
    xs, ys = lm.batches(M, seed=0)
    if change == "decay":
        pipe.step(xs, ys)
        rest = [p for p in test_tied.unique_params(chunks) if p is not last]
        torch.optim.AdamW([{"params": rest, "weight_decay": 0.0},
                           {"params": [last], "weight_decay": 0.1}], lr=0.01).step()
    else:
        with torch.no_grad():  # one value's last bit
            last.view(torch.int16 if dtype == torch.bfloat16 else torch.int32)[0, 0] += 1
    grads = (first.grad, last.grad)
    call = pipe.eval_step if change == "eval" else pipe.step
    with pytest.raises(ValueError, match=r"copies of '0.0.tok.weight' hold different values "
                                         r"\(0.0.tok.weight; 3.1.embed.weight\)"):
        call(xs, ys)
    assert first.grad is grads[0] and last.grad is grads[1]  # refused before the step ran
    with torch.no_grad():
        last.copy_(first)
    call(xs, ys)  # equal again: accepted


def layout(kind):
    """A pipeline of the tied GPT whose tie is two copies declared with `tied=` ("copies") or
    one parameter that the first and last chunks share ("one object")."""
    if kind == "copies":
        return pipeline()
    return rrfp.Pipeline(test_tied.tied_gpt(PP), lm.loss_fn, pp=PP, microbatches=M)


@pytest.mark.parametrize("kind", ["copies", "one object"])
def test_load_makes_the_copies_equal_again(tmp_path, kind):
    # A checkpoint whose copies differ (here, one changed after construction) loads with the
    # first copy's values in every copy, as construction gives them, in either layout (one
    # object took the last chunk's entry, loaded after the first's).
    pipe = pipeline()
    first, last = pipe.chunks[0][0].tok.weight, pipe.chunks[PP - 1][-1].embed.weight
    with torch.no_grad():
        last.add_(1.0)
    pipe.save(tmp_path)
    again = layout(kind)
    assert again.load(tmp_path) == {}
    got_first, got_last = again.chunks[0][0].tok.weight, again.chunks[PP - 1][-1].embed.weight
    assert torch.equal(got_first, first) and torch.equal(got_last, first)


@pytest.mark.parametrize("kind", ["copies", "one object"])
@pytest.mark.parametrize("entries", ["both", "second only"])
def test_load_state_dict_gives_the_copies_one_value(entries, kind):
    # A state_dict whose copies differ, or that holds one name of the tie: every copy loads the
    # first name it holds. Each copy loading its own entry left them apart for good (stepped
    # alike, never made equal again). One object loaded the last chunk's entry, and refused a
    # state naming the tie once (KeyError), which copies loaded.
    pipe = layout(kind)
    first, last = pipe.chunks[0][0].tok.weight, pipe.chunks[PP - 1][-1].embed.weight
    # Clones: the state's entries are views of the parameters, which the load overwrites.
    state = {k: v.clone() for k, v in pipe.state_dict().items()}
    head = f"{PP - 1}.1.embed.weight"
    want = state[head] + 5.0
    if entries == "both":
        state[head] = want
        want = state["0.0.tok.weight"]
    else:
        del state["0.0.tok.weight"]
        state[head] = want
    pipe.load_state_dict(state)
    assert torch.equal(first, want) and torch.equal(last, want)
    pipe.step(*lm.batches(M, seed=0))
    assert torch.equal(first, last)


def test_a_state_of_fewer_chunks_names_the_chunks_it_lacks():
    # The state of the tied model in 4 chunks, loaded into the same model in 8: the copy of
    # the tie filled chunk 7's entry, so that only chunks 4-6 lack entries, and chunk 3, with
    # entries of chunk 3 of 4, was told as names unexpected and nothing more.
    four = rrfp.Pipeline(test_tied.tied_gpt(4), lm.loss_fn, pp=2, vpp=2, microbatches=M)
    eight = rrfp.Pipeline(test_tied.tied_gpt(8), lm.loss_fn, pp=4, vpp=2, microbatches=M)
    with pytest.raises(KeyError, match="chunk 3: missing \\[\\], unexpected \\[1.ln.weight, .*"
                                       "no entry of chunks 4, 5, 6 of this model's 8: saved from a "
                                       "model cut into other chunks"):
        eight.load_state_dict(four.state_dict())


def test_loaded_copies_get_optimizer_state_of_their_own(tmp_path):
    # Both copies live in this process and share the tie's name in the checkpoint; each must
    # get its own momentum buffer, or one step would update the shared one twice and the
    # copies would move apart.
    pipe = pipeline()
    chunks = [pipe.chunks[c] for c in range(PP)]
    opt = mp_tied.sgd(test_tied.unique_params(chunks))
    mp_tied.train(pipe, opt, M)
    pipe.save(tmp_path, opt)
    again = pipeline(shift=3.0)
    chunks2 = [again.chunks[c] for c in range(PP)]
    opt2 = mp_tied.sgd(test_tied.unique_params(chunks2))
    again.load(tmp_path, opt2)
    first, last = chunks2[0][0].tok.weight, chunks2[-1][-1].embed.weight
    assert opt2.state[first]["momentum_buffer"] is not opt2.state[last]["momentum_buffer"]
    mp_tied.train(again, opt2, M)
    assert torch.equal(first, last)


def test_a_replaced_copy_takes_the_first_copys_values():
    # Replacing a parameter between steps is followed (fine-tuning does it); a tie's new copy
    # takes holder 0's values as the step starts, and gets the tie's gradient.
    pipe = pipeline()
    head = pipe.chunks[PP - 1][-1]
    first = pipe.chunks[0][0].tok.weight
    head.embed.weight = torch.nn.Parameter(torch.randn_like(first))
    pipe.step(*lm.batches(M, seed=0))
    assert torch.equal(head.embed.weight, first)
    assert torch.equal(head.embed.weight.grad, first.grad)


def test_a_copy_replaced_by_another_shape_is_refused():
    pipe = pipeline()
    first = pipe.chunks[0][0].tok.weight
    head = pipe.chunks[PP - 1][-1]
    head.embed.weight = torch.nn.Parameter(torch.zeros(first.shape[0] + 1, first.shape[1]))
    with pytest.raises(ValueError, match="replaced by a parameter of another shape"):
        pipe.step(*lm.batches(M, seed=0))
    assert first.grad is None  # refused before the step ran


def test_a_copy_gone_from_its_chunk_is_refused():
    pipe = pipeline()
    del pipe.chunks[PP - 1][-1].embed.weight
    with pytest.raises(ValueError, match=r"3.1.embed.weight is no longer a parameter"):
        pipe.step(*lm.batches(M, seed=0))


def test_a_copy_replaced_before_a_refused_step_is_still_made_equal():
    # The refused step (a batch that does not split) ends before the copies are compared; the
    # replacement is remembered, and the next step gives the new copy holder 0's values.
    pipe = pipeline()
    head, first = pipe.chunks[PP - 1][-1], pipe.chunks[0][0].tok.weight
    head.embed.weight = torch.nn.Parameter(torch.randn_like(first))
    xs, ys = lm.batches(M, seed=0)
    with pytest.raises(ValueError, match="a batch of 5 rows does not split evenly into 4"):
        pipe.step(torch.zeros(M + 1, 3, dtype=torch.long), torch.zeros(M + 1, 3, dtype=torch.long))
    pipe.step(xs, ys)
    assert torch.equal(head.embed.weight, first)


def test_a_copy_replaced_between_accumulating_steps_gets_the_first_copys_gradient():
    # Without zero_grad the step adds onto .grad; a new copy has none, so it takes holder 0's
    # with its values, and both copies end the step with the same gradient.
    pipe = pipeline()
    head, first = pipe.chunks[PP - 1][-1], pipe.chunks[0][0].tok.weight
    xs, ys = lm.batches(M, seed=0)
    pipe.step(xs, ys)
    head.embed.weight = torch.nn.Parameter(first.detach().clone())
    pipe.step(xs, ys)
    assert torch.equal(head.embed.weight.grad, first.grad)


def test_the_replicas_sum_takes_only_what_it_can_add():
    # The job's replica sum (which C++ tests against torch's arithmetic, and which refuses
    # replicas of other sizes on every replica) takes flat CPU tensors of the four float dtypes.
    pipe = pipeline()
    for bad in (torch.ones(3, dtype=torch.int32), torch.ones(2, 2), torch.ones(4)[::2]):
        with pytest.raises(ValueError, match="`parts`: each must be a contiguous"):
            pipe._core.dp_sum([bad])
    parts = [torch.ones(3, dtype=dt) for dt in
             (torch.float32, torch.float64, torch.float16, torch.bfloat16)]
    pipe._core.dp_sum(parts)  # one replica: nothing to add
    assert all(torch.equal(p, torch.ones(3, dtype=p.dtype)) for p in parts)


def test_copies_made_one_object_count_once():
    # The head's copy replaced by the embedding's parameter itself: one object in two chunks,
    # whose uses GradSums adds as a plain loop does, and which the tie no longer adds twice.
    pipe = pipeline()
    first = pipe.chunks[0][0].tok.weight
    pipe.chunks[PP - 1][-1].embed.weight = first
    xs, ys = lm.batches(M, seed=0)
    pipe.step(xs, ys)
    ref = test_tied.tied_gpt(PP)  # the same model, tied as one object from the start
    ref[0].load_state_dict(pipe.chunks[0].state_dict())
    for c in range(1, PP):
        ref[c].load_state_dict(pipe.chunks[c].state_dict(), strict=False)
    lm.reference_step(ref, xs, ys)
    assert torch.equal(first.grad, ref[0][0].tok.weight.grad)


def test_a_shared_buffer_loads_its_first_names_entry():
    # A buffer that chunks share as one object loads the entry of its first name, as a tied
    # parameter does (threads loaded the last chunk's, a process per stage each its own).
    pipe = rrfp.Pipeline(mp_tied.shared_buffer_chunks(PP), lambda y, t: (y - t).pow(2).mean(),
                         pp=PP, microbatches=M)
    state = {k: v.clone() for k, v in pipe.state_dict().items()}
    for c in range(PP):
        state[f"{c}.1.table"] += float(c + 1)
    pipe.load_state_dict(state)
    assert torch.equal(pipe.chunks[0][1].table, torch.arange(8.0) + 1.0)
    del state["0.1.table"]  # the first name it holds: chunk 1's
    pipe.load_state_dict(state, strict=False)
    assert torch.equal(pipe.chunks[PP - 1][1].table, torch.arange(8.0) + 2.0)


class Scaled(torch.nn.Module):
    """Saves a tensor it makes in each state_dict call, as a quantized Linear saves its scale."""

    def __init__(self, s):
        super().__init__()
        self.lin, self.s = torch.nn.Linear(8, 8), float(s)

    def forward(self, x):
        return self.lin(x) * self.s

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        destination[prefix + "s"] = torch.tensor(self.s)

    def _load_from_state_dict(self, state, prefix, *args):
        self.s = float(state.pop(prefix + "s"))
        super()._load_from_state_dict(state, prefix, *args)


def test_tensors_made_by_each_state_dict_call_are_not_shared():
    # Each chunk's state_dict was dropped before the next was read, so a tensor made in the
    # call could take a freed one's id: unrelated entries were loaded with one value (1.0).
    pipe = rrfp.Pipeline([Scaled(c + 1) for c in range(PP)], lambda y, t: (y - t).pow(2).mean(),
                         pp=PP, microbatches=M)
    pipe.load_state_dict(pipe.state_dict())
    assert [pipe.chunks[c].s for c in range(PP)] == [1.0, 2.0, 3.0, 4.0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16,
                                   torch.complex64])
def test_values_print_sees_one_bit_in_any_order(dtype):
    # 15 values: 2-byte dtypes leave 30 bytes, which the print pads to whole 32-bit words.
    x = torch.randn(3, 5).to(dtype)
    y = x.clone()
    y.reshape(-1).view(torch.uint8)[-1].bitwise_xor_(1)  # the last value's lowest bit
    assert values_print(y) != values_print(x) == values_print(x.clone())
    assert values_print(x.t()) == values_print(x.t().contiguous())  # any layout, any order
