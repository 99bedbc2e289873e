#!/usr/bin/env bash
# Installs the Debian 12 packages rrfp builds with. Idempotent; run as root (or with sudo).
# valgrind is for bench/sim_instructions.sh, which counts the simulator's instructions; time
# (GNU time: peak memory) for bench/speed.sh and bench/bad_input_limits.sh;
# python3-torchvision for the Python tests' model-zoo model (tests/python/test_model_zoo.py);
# python3-venv and python3-pip for `pip install .` into a venv (the README's way, tested by
# tests/python/pip_install.sh), with python3-setuptools and python3-wheel, which its
# --no-build-isolation build of setup.py takes from the system.
set -euo pipefail
pkgs=(build-essential cmake ninja-build g++ libgtest-dev libgmock-dev libbenchmark-dev
      nlohmann-json3-dev libcli11-dev clang-format libtorch-dev libopenmpi-dev openmpi-bin
      python3-dev python3-torch pybind11-dev python3-pytest python3-torchvision libgloo-dev
      python3-venv python3-pip python3-setuptools python3-wheel zlib1g-dev valgrind time)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
# The environment through `env`, which sudo's default policy would clear; apt waits up to 5
# minutes for a package lock (a fresh machine's automatic updates hold it), where it failed at once.
lock=(-o DPkg::Lock::Timeout=300)
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get "${lock[@]}" update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get "${lock[@]}" install -y -qq \
  --no-install-recommends "${missing[@]}"
