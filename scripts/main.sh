#!/usr/bin/env bash
# Builds rrfp and runs the main job on its embedded default: `rrfp train` (a small GPT on the
# Debian licence texts, P=4, rrfp with the BFW hint; outputs in rrfp-out/).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)" --target rrfp
./build/rrfp train "$@"
