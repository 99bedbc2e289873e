"""The digest that the processes of a replica compare before a step (each passed the same
batch?): it reads what a microbatch holds besides its tensors (NumPy arrays, numbers, strings,
nesting), the same in every process, where a set's order and an unpicklable part could differ."""
import os
import subprocess
import sys

import numpy as np
import torch

import rrfp
from rrfp._batch import digest
from rrfp._tree import tensors_in


def of(*microbatches):
    return digest(list(microbatches), [tensors_in(mb) for mb in microbatches])


def test_values_beside_the_tensors_count():
    # Each pair was one digest: only the tensors were read.
    y = torch.arange(4)
    assert of(np.array([1, 2])) != of(np.array([1, 3]))
    assert of([1, 2, 3]) != of([1, 2, 4])
    assert of((y, 0.5)) != of((y, 0.25))
    assert of({"y": y, "name": "a"}) != of({"y": y, "name": "b"})
    assert of({"y": y, "n": 1}) != of({"y": y, "m": 1})  # another key
    assert of([1, [2]]) != of([[1], 2])  # another nesting
    # Equal batches are equal, built apart.
    assert of({"y": torch.arange(4), "n": np.array([1.5])}) == \
        of({"y": torch.arange(4), "n": np.array([1.5])})
    assert of((y, 1)) != of((y * 2, 1))  # the tensors' values still count


def test_a_lambda_leaves_the_rest_compared():
    # An unpicklable part: its type stands for it, and what pytree opens around it is read.
    f = lambda x: x  # noqa: E731
    assert of({"f": f, "n": 1}) == of({"f": lambda x: x, "n": 1})
    assert of({"f": f, "n": 1}) != of({"f": f, "n": 2})
    assert of({"f": f, "y": torch.ones(2)}) != of({"f": f, "y": torch.zeros(2)})


def _in_process(hash_seed):
    code = ("import sys; sys.path[:0] = sys.argv[1:]\n"
            "import torch\nfrom rrfp._batch import digest\nfrom rrfp._tree import tensors_in\n"
            "mb = {'tags': {'alpha', 'beta', 'gamma', 'delta', 'eps'}, 'y': torch.ones(2),\n"
            "      'f': frozenset({'x', 'y', 'z'})}\n"
            "print(digest([mb], [tensors_in(mb)]))\n")
    env = dict(os.environ, PYTHONHASHSEED=str(hash_seed))
    package = os.path.dirname(os.path.dirname(rrfp.__file__))
    out = subprocess.run([sys.executable, "-c", code, package], env=env, timeout=120,
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_a_set_of_strings_digests_alike_in_every_process():
    # A set pickles in its members' hash order, which for strings differs from process to
    # process: the same batch would have been refused as another.
    got = {_in_process(seed) for seed in (1, 2, 3, 4)}
    assert len(got) == 1, got
