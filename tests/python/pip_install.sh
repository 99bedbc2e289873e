#!/usr/bin/env bash
# `pip install --no-build-isolation .` works from nothing but this machine's packages: into a
# fresh venv that sees the system's site-packages (Debian's torch), with pip's index switched
# off, then the installed package runs a pipeline step from outside the source tree.
# Usage: pip_install.sh SOURCE_DIR PYTHON
set -euo pipefail
src=$1
py=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" -m venv --system-site-packages "$tmp/venv"
PIP_NO_INDEX=1 "$tmp/venv/bin/pip" install --no-build-isolation -q "$src"
cd "$tmp"
"$tmp/venv/bin/python" - <<'PY'
import torch, rrfp
chunks = [torch.nn.Linear(4, 4) for _ in range(2)]
pipe = rrfp.Pipeline(chunks, lambda o, y: (o - y).square().sum(), pp=2, microbatches=2)
loss = pipe.step(torch.randn(4, 4), torch.randn(4, 4))
assert "site-packages" in rrfp.__file__, rrfp.__file__
print("installed rrfp at", rrfp.__file__, "ran a step, loss", float(loss))
PY
