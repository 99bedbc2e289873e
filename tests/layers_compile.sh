#!/usr/bin/env bash
# Builds each planted include (tests/CMakeLists.txt, layers_compile): a plant whose name starts
# with control_ must build; every other must fail, the compiler naming the header it could not
# find (so the refusal is the layer's, not some other error).
# Usage: layers_compile.sh CMAKE BUILD_DIR TARGET:HEADER...
set -u
cmake=$1 build=$2
shift 2
fails=0
for plant in "$@"; do
  target=${plant%%:*} header=${plant#*:}
  out=$("$cmake" --build "$build" --target "$target" 2>&1)
  rc=$?
  if [[ $target == plant_control_* ]]; then
    if [ $rc -ne 0 ]; then
      echo "FAIL: $target did not build:"; echo "$out" | tail -5; fails=$((fails + 1))
    else
      echo "ok: $target builds"
    fi
  elif [ $rc -eq 0 ]; then
    echo "FAIL: $target built: its include of $header crossed a layer unrefused"
    fails=$((fails + 1))
  elif ! grep -qF "$header: No such file or directory" <<<"$out"; then
    echo "FAIL: $target failed, but not on $header:"; echo "$out" | tail -5; fails=$((fails + 1))
  else
    echo "ok: $target refused ($header: no such file in its layers)"
  fi
done
[ $fails -eq 0 ] && echo "layers_compile: every plant refused, the control built"
exit $((fails > 0))
