#!/usr/bin/env bash
# The layer check: every #include under src/ names a header of its own folder or of a layer
# below it (docs/architecture.md), and <mpi.h> / LibTorch appear only where they may
# (<mpi.h> in comm/mpi_* and dist/mpi_*; LibTorch in train/, python/, gpu/ and comm|dist/c10d_*).
#   core <- sim | comm;  comm <- runtime <- dist <- train;  report, plan on sim;
#   emulate on runtime and sim;  python on dist and report;  gpu on LibTorch alone;  cli on all
# The build enforces the same with per-layer include roots (src/CMakeLists.txt); this check also
# sees what the compiler cannot: a header's upward include that only upper layers compile.
# Usage: check_layers.sh SRC_DIR          exit 1 listing every forbidden include
#        check_layers.sh --self-test SRC  plants a forbidden include in a copy of SRC and
#                                         expects the check to refuse it (exit 0 if it does)
set -euo pipefail

# Folders each folder may include from (its own included).
declare -A allowed=(
  [core]="core"
  [sim]="core sim"
  [comm]="core comm"
  [report]="core sim report"
  [runtime]="core comm runtime"
  [emulate]="core sim comm runtime emulate"
  [dist]="core comm runtime dist"
  [train]="core sim comm report runtime dist train"
  [python]="core sim comm report runtime dist python"
  [plan]="core sim plan"
  [gpu]="gpu"
  [cli]="core sim plan comm report runtime emulate dist train gpu cli"
)

check() {
  local src=$1 bad=0 file layer line target
  while IFS= read -r file; do
    layer=${file#"$src"/}
    layer=${layer%%/*}
    if [[ -z ${allowed[$layer]+x} ]]; then
      echo "check_layers: $file: folder '$layer' has no place in the layer table"
      bad=1
      continue
    fi
    while IFS= read -r line; do
      if [[ $line =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\"([a-z_]+)/ ]]; then
        target=${BASH_REMATCH[1]}
        if [[ " ${allowed[$layer]} " != *" $target "* ]]; then
          echo "check_layers: $file: $layer/ may not include $target/ ($line)"
          bad=1
        fi
      elif [[ $line =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\<mpi\.h\> ]]; then
        # Only the transport and the job layer speak MPI, and only in their mpi_* files.
        if [[ ! $file =~ /(comm|dist)/mpi_[a-z_]+\.(cpp|hpp)$ ]]; then
          echo "check_layers: $file: only comm/mpi_* and dist/mpi_* include <mpi.h>"
          bad=1
        fi
      elif [[ $line =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\<(torch|ATen|c10)/ ]]; then
        # Training and Python use LibTorch; of the transports, only the c10d one (comm/c10d_*,
        # dist/c10d_*) includes it, for its ProcessGroup.
        if [[ $layer != train && $layer != python && $layer != gpu && ! $file =~ /(comm|dist)/c10d_[a-z_]+\.(cpp|hpp)$ ]]; then
          echo "check_layers: $file: only train/, python/, gpu/ and the c10d transport include LibTorch"
          bad=1
        fi
      fi
    done <"$file"
  done < <(find "$src" -type f \( -name '*.cpp' -o -name '*.hpp' \) | sort)
  return $bad
}

if [[ ${1:-} == --self-test ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  cp -r "$2" "$tmp/src"
  check "$tmp/src" >/dev/null || { echo "self-test: the unmodified tree must pass first"; exit 1; }
  # Each plant alone must be refused, and named in the output.
  for plant in 'core/task.hpp:#include "runtime/stage.hpp"' \
               'comm/transport.hpp:#include "runtime/stage.hpp"' \
               'sim/simulator.cpp:#include <mpi.h>' \
               'runtime/stage.cpp:#include <torch/torch.h>'; do
    file=$tmp/src/${plant%%:*}
    cp "$file" "$file.orig"
    echo "${plant#*:}" >>"$file"
    if out=$(check "$tmp/src"); then
      echo "self-test: planting '${plant#*:}' in ${plant%%:*} was not refused"
      exit 1
    fi
    grep -q "${plant%%:*}" <<<"$out" || { echo "self-test: refusal does not name the file"; exit 1; }
    mv "$file.orig" "$file"
  done
  echo "self-test: 4 planted forbidden includes refused"
  exit 0
fi

check "${1:?usage: check_layers.sh SRC_DIR}"
echo "check_layers: every include respects the layers"
