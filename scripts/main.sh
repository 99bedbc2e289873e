#!/usr/bin/env bash
# Builds rrfp and runs the main job on its embedded default: `rrfp train` (a small GPT on the
# Debian licence texts, P=4, rrfp with the BFW hint; outputs in rrfp-out/).
set -euo pipefail
cd "$(dirname "$0")/.."
# The preset gives the options' defaults: a build/ configured before without LibTorch kept that.
cmake --preset release
cmake --build build -j "$(nproc)" --target rrfp
./build/rrfp train "$@"
