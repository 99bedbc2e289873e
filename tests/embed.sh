#!/usr/bin/env bash
# rrfp's libraries inside a user's CMake project (tests/embed: add_subdirectory, rrfp::sim):
# configured without the packages only rrfp's own programs, tests and benchmarks need (CLI11,
# GoogleTest, Google Benchmark), its build type left to the host, none of rrfp's tests added to
# the host's, and its program simulating the step `rrfp simulate` reports, to the nanosecond.
# Usage: embed.sh CMAKE RRFP_SOURCE RRFP
set -u
cmake=$1 source=$2 rrfp=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cd "$tmp" || exit 1
"$cmake" -S "$source/tests/embed" -B host -DRRFP_SOURCE="$source" -DRRFP_WITH_TORCH=OFF \
  -DRRFP_WITH_MPI=OFF -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON \
  >configure.log 2>&1 || fail "configure: $(grep -m3 -i error -A3 configure.log)"
grep -q "^CMAKE_BUILD_TYPE:STRING=$" host/CMakeCache.txt ||
  fail "the host's build type was set: $(grep ^CMAKE_BUILD_TYPE host/CMakeCache.txt)"
"$cmake" --build host --target simulate_1f1b -j2 >build.log 2>&1 ||
  fail "build: $(grep -m3 -i error build.log)"
ctest=$(dirname "$cmake")/ctest
[ -x "$ctest" ] || ctest=ctest
(cd host && "$ctest" -N) | grep -q "^Total Tests: 0$" || fail "rrfp's tests were added to the host's"
got=$(host/simulate_1f1b) || fail "the host's program: $got"
"$rrfp" simulate --pp 2 -m 4 --workload multimodal --hint 1f1b --policy fixed --json s.json >/dev/null
want=$(/usr/bin/python3 -c "import json; print(round(json.load(open('s.json'))['runs'][0]['makespan_ms'] * 1e6))")
[ "$got" = "$want" ] || fail "the host's simulation: $got ns, rrfp simulate: $want ns"
echo "embed checks passed ($got ns)"
