#!/usr/bin/env bash
# scripts/gpu-check.sh driving the real rrfp of this build (--device cpu, a tiny model) through
# its J2 and image-text runs (fixed 1F1B, ready BF, ready BFW): each trains, and the table reads
# every column of their loss.csv (a stand-in rrfp wrote a few of them: a renamed column would
# have shown only on a GPU, in its window). The CUDA tests stand in: on a CPU they skip, which
# fails the check. Usage: gpu_check_cpu.sh PATH/TO/rrfp [ON|OFF: whether the build has LibTorch]
rrfp=$1 torch=${2:-}
source "$(dirname "$0")/gpu_check_repo.sh"
source "$(dirname "$0")/train_gate.sh"
[ "$trains" = ON ] || { echo "skipped: this build does not train (no LibTorch)"; exit 77; }
mkdir -p "$repo/build-gpu/tests" "$repo/.gpu-deps/corpus"
ln -s "$rrfp" "$repo/build-gpu/rrfp"
cat "$src"/docs/*.md >"$repo/.gpu-deps/corpus/docs.txt"
printf '#!/bin/sh\necho "[       OK ] CudaOptions.StandIn (0 ms)"\n' >"$repo/build-gpu/tests/test_train_cuda"
chmod +x "$repo/build-gpu/tests/test_train_cuda"
export GPU_CHECK_NO_BUILD=1 GPU_CHECK_STEPS=4 GPU_CHECK_SECONDS=200 GPU_CHECK_HARD=260
export GPU_CHECK_ARGS='--device cpu --d-model 16 --heads 2 --layers 4 --max-seq 64'
export GPU_CHECK_ONLY='^(j2|img)-(fixed-1f1b|ready-bfw?)$'
timeout 290 "$repo/scripts/gpu-check.sh" "$tmp/out" >"$tmp/console" 2>&1
rc=$?
[ $rc -eq 0 ] || fail "gpu-check on the CPU: exit $rc: $(grep -E "failed|error|Error" "$tmp/console" | head -5)"
# Each run's row: its 2 measured steps, and a number in every column but MFU (no bf16 peak).
/usr/bin/python3 - "$tmp/out/summary.md" <<'PY' || fail "the summary's rows: $(cat "$tmp/out/summary.md")"
import sys
rows = {}
for line in open(sys.argv[1]):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) == 11 and cells[0][:3] in ("j2-", "img"):
        rows[cells[0]] = cells
want = [f"{j}-{r}" for j in ("j2", "img") for r in ("fixed-1f1b", "ready-bf", "ready-bfw")]
assert sorted(rows) == sorted(want), sorted(rows)
for name, cells in rows.items():
    assert cells[1] == "2", (name, cells)
    for c in cells[2:10]:
        assert c not in ("", "-") and any(ch.isdigit() for ch in c), (name, c, cells)
PY
[ "$fails" -eq 0 ] || { echo "--- console"; tail -30 "$tmp/console"; exit 1; }
echo "gpu-check on the CPU: six runs trained, every column of the table read"
