#!/usr/bin/env bash
# `rrfp` links no LibTorch: only `rrfp-train` does (src/cli/train_flags.hpp), so every other
# subcommand starts in milliseconds and an MPI job's processes do not each map it.
# Usage: cli_links.sh path/to/rrfp
set -euo pipefail
libs=$(ldd "$1")
if grep -E 'libtorch|libc10' <<<"$libs"; then
  echo "FAIL: $1 links LibTorch"
  exit 1
fi
echo "ok: $1 links no LibTorch ($(wc -l <<<"$libs") libraries)"
