#!/usr/bin/env bash
# Builds rrfp on a GPU machine against its CUDA PyTorch: the library, `rrfp` and `rrfp-train`,
# the CUDA tests and, where the interpreter's headers are there, the Python extension. Open MPI
# is left out. What the machine lacks (nlohmann-json, CLI11, GoogleTest) comes from
# .gpu-deps, which scripts/gpu-deps.sh prepares on a Debian machine.
# Usage: scripts/build-gpu.sh [build dir, default build-gpu]
#   PYTHON=... picks the interpreter; RRFP_CMAKE_ARGS adds CMake options (-DRRFP_SM_PARTITIONS=OFF);
#   BUILD_GPU_PYTHON=0 leaves the Python extension out (about 40 s of the build)
set -euo pipefail
build=${1:+$(realpath -m -- "$1")}  # the caller's, resolved before the cd below
cd "$(dirname "$0")/.."
build=${build:-build-gpu}
py=${PYTHON:-python3}
deps=$PWD/.gpu-deps/root/usr
if [ ! -d "$deps" ]; then
  echo "build-gpu: no .gpu-deps here: run scripts/gpu-deps.sh on a Debian machine and bring it" >&2
  exit 2
fi
# Each precondition said in one line before the configure (a missing torch ended in a bare
# traceback; a toolkit of another CUDA than torch's would mix two runtimes in one process).
if ! torch_said=$("$py" -c 'import torch; print(torch.__version__, torch.version.cuda or "none")' 2>&1); then
  echo "build-gpu: $py cannot import torch: $(echo "$torch_said" | tail -1)" >&2
  exit 2
fi
read -r torch_version torch_cuda <<<"$(echo "$torch_said" | tail -1)"
torch_prefix=$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)')
"$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' ||
  { echo "build-gpu: $py's torch $torch_version (CUDA $torch_cuda) sees no CUDA device" >&2; exit 2; }
pybind=$("$py" -m pybind11 --cmakedir 2>/dev/null || true)
cuda_root=${CUDA_HOME:-/usr/local/cuda}
export PATH=$cuda_root/bin:$PATH
nvcc_cuda=$(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' | cut -d' ' -f2 || true)
if [ -z "$nvcc_cuda" ]; then
  echo "build-gpu: no nvcc in $cuda_root/bin (set CUDA_HOME to the CUDA toolkit)" >&2
  exit 2
elif [ "${nvcc_cuda%%.*}" != "${torch_cuda%%.*}" ]; then
  echo "build-gpu: nvcc is CUDA $nvcc_cuda, torch $torch_version is built with CUDA $torch_cuda:" \
    "set CUDA_HOME to a toolkit of CUDA ${torch_cuda%%.*}" >&2
  exit 2
fi
echo "build-gpu: torch $torch_version (CUDA $torch_cuda), nvcc CUDA $nvcc_cuda"
# zlib, named explicitly: left to CMake it finds Debian's static archive in .gpu-deps first (the
# prefix path), which the Python extension, a shared object, cannot take (not position-
# independent: its link failed on an H200 machine). The machine's shared library (the one the
# interpreter's zlib module maps, else the usual places), with its headers or else Debian's.
zinc=/usr/include
[ -e "$zinc/zlib.h" ] || zinc=$deps/include
libz=$("$py" -c 'import zlib
print(next((l.split()[-1] for l in open("/proc/self/maps") if "/libz.so" in l), ""))' 2>/dev/null ||
  true)
for f in /lib/x86_64-linux-gnu/libz.so.1 /usr/lib/x86_64-linux-gnu/libz.so.1 \
  "$deps/lib/x86_64-linux-gnu/libz.a"; do
  [ -n "$libz" ] && [ -e "$libz" ] && break
  libz=$f
done
echo "build-gpu: zlib $libz, headers in $zinc"
zlib=(-DZLIB_INCLUDE_DIR="$zinc" -DZLIB_LIBRARY="$libz")
configure() { # configure WITH_PYTHON [extra CMake args...]
  local with_python=$1
  shift
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$torch_prefix;$deps;$deps/lib/x86_64-linux-gnu/cmake;$deps/share/cmake" \
    -DRRFP_CUDA=ON -DRRFP_WITH_TORCH=ON -DRRFP_WITH_MPI=OFF -DRRFP_BUILD_BENCH=OFF \
    -DRRFP_WITH_PYTHON="$with_python" -DRRFP_PYTHON_EXECUTABLE="$(command -v "$py")" \
    ${pybind:+-Dpybind11_DIR="$pybind"} -DCUDAToolkit_ROOT="$cuda_root" -DTORCH_CUDA_ARCH_LIST=9.0 \
    "${zlib[@]}" "$@" ${RRFP_CMAKE_ARGS:-}
}
# The Python extension (rrfp.Pipeline(device="cuda")) with pybind11's classic Python search: its
# FindPython mode failed on this image's tools (python_add_library). Without pybind11, or if
# that fails too, the build goes on without the extension.
targets=(rrfp rrfp-train test_train_cuda)
python=0
if [ "${BUILD_GPU_PYTHON:-1}" = 0 ]; then
  echo "build-gpu: the Python extension is left out (BUILD_GPU_PYTHON=0)"
  configure OFF
elif [ -n "$pybind" ] && configure ON -DPYBIND11_FINDPYTHON=OFF; then
  python=1
else
  echo "build-gpu: the Python extension is left out (no pybind11 for $py, or its configuration failed)"
  rm -f "$build/CMakeCache.txt"
  configure OFF
fi
cmake --build "$build" --target "${targets[@]}" -j "$(nproc)"
echo "build-gpu: built ${targets[*]} in $build"
# The extension last, on its own: should it fail to compile, the rest stands.
if [ "$python" = 1 ]; then
  if cmake --build "$build" --target rrfp_python -j "$(nproc)"; then
    echo "build-gpu: built rrfp_python in $build"
  else
    echo "build-gpu: the Python extension failed to build (above); rrfp itself is built"
  fi
fi
