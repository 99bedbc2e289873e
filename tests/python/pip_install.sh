#!/usr/bin/env bash
# `pip install --no-build-isolation .` works from nothing but this machine's packages: into a
# fresh venv that sees the system's site-packages (Debian's torch), with pip's index switched
# off, then the installed package runs a pipeline step from outside the source tree, and a
# two-process torchrun job launched from the venv.
# The extension is taken from the suite's own build (RRFP_BUILD_DIR): compiling it all again in
# build-pip/ took 5 of the suite's minutes on 2 cores, every other test waiting. What that path
# adds is checked here without compiling: a fresh tree configured as setup.py configures it
# (tests and benchmarks off) has the extension's target, with every source it needs.
# Usage: pip_install.sh SOURCE_DIR PYTHON BUILD_DIR
set -euo pipefail
src=$1
py=$2
build=$3
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" - "$src/setup.py" "$tmp/fresh" <<'PY'
import runpy, subprocess, sys
setup_py, fresh = sys.argv[1], sys.argv[2]
sys.argv = [setup_py, "--name"]  # setup() prints a name and builds nothing
configure = runpy.run_path(setup_py)["configure_command"]
subprocess.run(configure(fresh), check=True, stdout=subprocess.DEVNULL)
# -n: ninja plans the build and fails on a missing source or target, compiling nothing.
subprocess.run(["cmake", "--build", fresh, "--target", "rrfp_python", "--", "-n"], check=True,
               stdout=subprocess.DEVNULL)
print("a fresh tree configured as setup.py does has the extension's target")
PY
"$py" -m venv --system-site-packages "$tmp/venv"
RRFP_BUILD_DIR=$build PIP_NO_INDEX=1 "$tmp/venv/bin/pip" install --no-build-isolation -q "$src"
cd "$tmp"
"$tmp/venv/bin/python" - <<'PY'
import torch, rrfp
chunks = [torch.nn.Linear(4, 4) for _ in range(2)]
pipe = rrfp.Pipeline(chunks, lambda o, y: (o - y).square().sum(), pp=2, microbatches=2)
loss = pipe.step(torch.randn(4, 4), torch.randn(4, 4))
assert "site-packages" in rrfp.__file__, rrfp.__file__
print("installed rrfp at", rrfp.__file__, "ran a step, loss", float(loss))
PY
# torchrun from the venv: the venv's interpreter runs the launcher as a module, and its workers
# (sys.executable) import the installed package (/usr/bin/torchrun would run /usr/bin/python3,
# which does not see the venv).
cat >"$tmp/two.py" <<'PY'
import torch, rrfp
torch.manual_seed(0)
chunks = [torch.nn.Linear(4, 4) for _ in range(2)]
pipe = rrfp.Pipeline(chunks, lambda o, y: (o - y).square().sum(), pp=2, microbatches=2)
loss = pipe.step(torch.randn(4, 4), torch.randn(4, 4))
assert "site-packages" in rrfp.__file__, rrfp.__file__
print("rank", pipe.rank, "of a torchrun job from the venv, loss", float(loss))
PY
ran=$(bash "$here/torchrun.sh" "$tmp/venv/bin/python" 2 "$tmp/two.py" 2>&1) || { echo "$ran"; exit 1; }
echo "$ran" | grep "of a torchrun job from the venv" | sort
[ "$(echo "$ran" | grep -c "of a torchrun job from the venv")" -eq 2 ]
