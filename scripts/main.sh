#!/usr/bin/env bash
# Builds rrfp and runs the main job on its embedded default: `rrfp train` (a small GPT on the
# Debian licence texts, P=4, rrfp with the BFW hint; outputs in rrfp-out/).
set -euo pipefail
root=$(cd -- "$(dirname "$0")/.." >/dev/null && pwd)  # silent: cd prints under CDPATH
# The preset gives the options' defaults: a build/ configured before without LibTorch (or with a
# sanitizer, which leaves it out) kept that.
(cd "$root" && cmake --preset release && cmake --build build -j "$(nproc)" --target rrfp)
# From the caller's folder: the flags' relative paths (--data, --out) are the caller's, as they
# are to `rrfp train` itself (they were read from the repository's root).
"$root/build/rrfp" train "$@"
