#!/usr/bin/env bash
# The CLI's good paths that round-trip through its files and streams: a hint file written by
# `schedule show` checks and simulates back, at its own shape; `--json -` keeps stdout JSON alone;
# a measured trace's input times; a plan simulated again gives the makespan it printed.
# Usage: cli_round_trips.sh PATH/TO/rrfp [ON|OFF: whether the build has LibTorch]
here=$(cd "$(dirname "$0")" && pwd)
source "$here/cli_check.sh"
"$rrfp" schedule show --hint zb-h1 --out "$tmp/zb.json" >/dev/null || { echo "FAIL: schedule show"; fails=$((fails + 1)); }
"$rrfp" schedule check --split-backward on "$tmp/zb.json" >/dev/null || { echo "FAIL: check of a written hint"; fails=$((fails + 1)); }
# --split-backward auto, the default, takes the split the file declares, as simulate does (check
# took auto for off, and refused the zero-bubble hint show had just written).
"$rrfp" schedule check "$tmp/zb.json" >/dev/null || { echo "FAIL: check of a written split hint, auto"; fails=$((fails + 1)); }
# The shape the file was written for stands for each shape flag not given (a file written at
# --pp 2 -m 5 was checked against the defaults, 4 and 8, and refused); one given still rules.
for ext in txt json; do
  "$rrfp" schedule show --pp 3 --vpp 2 --placement vshape -m 5 --hint zb-v --out "$tmp/v.$ext" \
    >/dev/null && "$rrfp" schedule check "$tmp/v.$ext" >"$tmp/v.out" 2>&1 &&
    grep -q "is a valid hint for P=3 V=2 (vshape) M=5 (split backward)" "$tmp/v.out" ||
    { echo "FAIL: the $ext file's own shape: $(cat "$tmp/v.out")"; fails=$((fails + 1)); }
  check "hint was written for pp=3 but the run has pp=4" schedule check --pp 4 "$tmp/v.$ext"
done
# The JSON as its parser reads it: escaped keys and values ("v\u0070p") and a whole number
# written 3.0 or 3e0 are the shape too (they were not, and the file was refused against the
# defaults).
sed -e 's/"vpp"/"v\\u0070p"/; s/"vshape"/"v\\u0073hape"/; s/"pp": *3/"pp": 3e0/' "$tmp/v.json" \
  >"$tmp/v-escaped.json"
"$rrfp" schedule check "$tmp/v-escaped.json" 2>&1 | grep -q "is a valid hint for P=3 V=2 (vshape) M=5" ||
  { echo "FAIL: escapes and 3e0: $("$rrfp" schedule check "$tmp/v-escaped.json" 2>&1)"; fails=$((fails + 1)); }
# A large hint rrfp wrote reads back: the caps grow with the run (a stage's line is 400 KB here).
for ext in txt json; do
  "$rrfp" schedule show --pp 8 -m 20000 --hint 1f1b --out "$tmp/big.$ext" >/dev/null &&
    "$rrfp" schedule check --pp 8 -m 20000 "$tmp/big.$ext" >/dev/null ||
    { echo "FAIL: a large written $ext hint does not read back"; fails=$((fails + 1)); }
done
"$rrfp" simulate --hint "$tmp/zb.json" --pp 4 --microbatches 8 --split-backward on --policy ready >/dev/null || { echo "FAIL: simulate from hint file"; fails=$((fails + 1)); }
# With --json - stdout is the JSON alone: the human lines (trace:, timeline:, running ...) go
# to stderr.
for cmd in simulate run; do
  "$rrfp" $cmd --pp 2 -m 4 --workload uniform --hint 1f1b --json - --trace "$tmp/t.json" \
    --svg "$tmp/t.svg" >"$tmp/json" 2>"$tmp/human" || { echo "FAIL: $cmd --json -"; fails=$((fails + 1)); }
  if [ "$(head -c 1 "$tmp/json")" != "{" ] || [ "$(tail -c 2 "$tmp/json" | head -c 1)" != "}" ] ||
     ! grep -q "^trace: " "$tmp/human"; then
    echo "FAIL: $cmd --json - mixes human lines into stdout:"; head -3 "$tmp/json"; fails=$((fails + 1))
  fi
done
# A measured step's trace says when each task's input from another stage arrived (input_us),
# never after the task started; a simulated one has no such time.
for cmd in simulate run; do
  "$rrfp" $cmd --pp 2 -m 4 --workload uniform --hint 1f1b --policy fixed --trace "$tmp/in.json" \
    >/dev/null 2>&1 && /usr/bin/python3 - "$tmp/in.json" "$cmd" <<'PY' ||
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
tasks = [e for e in events if e.get("ph") == "X" and "kind" in e.get("args", {})]
assert len(tasks) == 16, len(tasks)
inputs = [e for e in tasks if "input_us" in e["args"]]
if sys.argv[2] == "simulate":
    assert not inputs, inputs[0]
else:
    # The inputs from the other stage: stage 1's forwards, stage 0's backwards.
    want = {(1, "F"), (0, "B")}
    assert sorted((e["pid"], e["args"]["kind"], e["args"]["microbatch"]) for e in inputs) == \
        sorted((s, k, m) for s, k in want for m in range(4)), inputs
    assert all(e["args"]["input_us"] <= e["ts"] for e in inputs), inputs
PY
    { echo "FAIL: $cmd --trace: input_us missing or wrong:"; fails=$((fails + 1)); }
done
# rrfp plan's round trip: the written plan, simulated under the fixed policy with the same flags,
# gives the makespan the plan printed.
plan_flags=(--pp 3 -m 6 --workload multimodal --seed 4 --split-backward on)
"$rrfp" plan "${plan_flags[@]}" --max-evaluations 400 --exact off --out "$tmp/plan.json" --json - \
  >"$tmp/plan.out" 2>/dev/null || { echo "FAIL: plan"; fails=$((fails + 1)); }
"$rrfp" simulate "${plan_flags[@]}" --hint "$tmp/plan.json" --policy fixed --json - \
  >"$tmp/replan.out" || { echo "FAIL: simulate the plan"; fails=$((fails + 1)); }
want=$(grep -m1 -o '"makespan_ms": [0-9.]*' "$tmp/plan.out")
got=$(grep -m1 -o '"makespan_ms": [0-9.]*' "$tmp/replan.out")
[ -n "$want" ] && [ "$want" = "$got" ] ||
  { echo "FAIL: plan makespan '$want', simulated again '$got'"; fails=$((fails + 1)); }
# A start order that deadlocks has no makespan: null and "feasible": false (it read 0.0 ms, the
# fastest of all), while the text said infeasible.
"$rrfp" plan --pp 3 -m 6 --workload multimodal --exact off --max-evaluations 50 --json - \
  >"$tmp/starts.json" 2>/dev/null &&
  /usr/bin/python3 - "$tmp/starts.json" <<'PY' || { echo "FAIL: plan --json's infeasible starts"; fails=$((fails + 1)); }
import json, sys
starts = json.load(open(sys.argv[1]))["plan"]["starts"]
bad = [s for s in starts if not s["feasible"]]
assert bad and all(s["makespan_ms"] is None for s in bad), starts
assert all(s["makespan_ms"] > 0 for s in starts if s["feasible"]), starts
assert any(s["name"] == "fixed gpipe" for s in bad), starts
PY
echo "cli round-trip checks: $fails failed"
[ "$fails" -eq 0 ]
