#!/usr/bin/env bash
# Builds rrfp and runs the main job on its embedded default: `rrfp train` (a small GPT on the
# Debian licence texts, P=4, rrfp with the BFW hint; outputs in rrfp-out/).
set -euo pipefail
cd "$(dirname "$0")/.."
# The options' defaults given: a build/ configured before without LibTorch kept that.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DRRFP_WITH_TORCH=AUTO \
  -DRRFP_WITH_MPI=AUTO -DRRFP_WITH_PYTHON=AUTO
cmake --build build -j "$(nproc)" --target rrfp
./build/rrfp train "$@"
