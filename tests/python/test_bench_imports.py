"""The benchmark scripts under bench/ name rrfp's internals (from rrfp._x import y) that no test
runs: each such name must still be there (bench/python_parts.py imported GradSums from
rrfp._stage, where it no longer was, and failed at once). Read from the scripts' text, so that
no benchmark runs here."""
import ast
import importlib
import importlib.util
import os

import pytest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")
SCRIPTS = sorted(f for f in os.listdir(BENCH) if f.endswith(".py"))


def rrfp_imports(path):
    """(line, module, name) for every `from rrfp... import name` in the script."""
    tree = ast.parse(open(path).read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and \
                node.module.split(".")[0] == "rrfp":
            for alias in node.names:
                yield node.lineno, node.module, alias.name


def test_every_script_is_seen():
    assert "python_parts.py" in SCRIPTS and len(SCRIPTS) >= 10


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_rrfp_names_a_benchmark_imports_are_there(script):
    for line, module, name in rrfp_imports(os.path.join(BENCH, script)):
        mod = importlib.import_module(module)
        assert hasattr(mod, name) or importlib.util.find_spec(f"{module}.{name}"), \
            f"bench/{script}:{line}: from {module} import {name}: {module} has no {name}"
