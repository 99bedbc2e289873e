#!/usr/bin/env bash
# Bad input to rrfp predict and to trace replays (simulate --replay): exit code 2 and exactly one
# line on stderr naming the problem; and a trace rrfp wrote replays its own step exactly. The
# rest of the CLI's bad input: cli_bad_input.sh. Usage: cli_bad_replay.sh PATH/TO/rrfp [ON|OFF]
here=$(cd "$(dirname "$0")" && pwd)
source "$here/cli_check.sh"
# rrfp predict and trace replays: one line for bad traces and flags; a trace written by
# simulate predicts its own step back exactly (0.0% reproduction) and keeps the JSON on stdout.
data=$(cd "$(dirname "$0")" && pwd)/data
check "--trace-format: nvtx not in" predict "$data/torch-pp2" --trace-format nvtx
# A format that finds no task names the trace (it named no file, and an id out of range).
check "torch-pp2: the megatron trace holds no task to tell its shape by" predict "$data/torch-pp2" --trace-format megatron
# A positional is named as the help names it, and a missing one as missing, whatever its name.
check "TRACE: '$tmp/none' does not exist" predict "$tmp/none"
check "FILE: '$tmp/none' does not exist" schedule check "$tmp/none"
# A trace of more stages than the shape names the stages the shape has ("has a stage 4, but
# --pp is 4" read as if stage 4 were one of four).
"$rrfp" simulate --pp 4 -m 4 --hint bf --policy ready --trace "$tmp/p4.json" >/dev/null
check "records stage 2, which --pp 2 (stages 0 to 1) lacks: give the shape the trace was recorded with" simulate --replay "$tmp/p4.json" --pp 2 -m 4 --hint bf --policy ready
# The work's estimate comes once the trace is read: a shape the trace cannot fill printed it
# above the refusal, two lines.
check "the rrfp timeline lacks tasks this shape needs" predict "$tmp/p4.json" -m 1048576
check "--hints: 'nope' is not a rule hint" predict "$data/torch-pp2" --hints bf,nope
check "has no step 9; it has 1, 2" predict "$data/torch-pp2" --step 9
check "1 rank(s) with task spans, but the shape has 2" \
  simulate --replay "$data/torch-pp2/rank0.json.gz" --pp 2 -m 4 --hint 1f1b
printf '[{"ph": "X", "name": "aten::mm", "ts": 0, "dur": 1}]' >"$tmp/ops.json"
check "no mapping recognizes this trace" predict "$tmp/ops.json"
# A trace's fields are named as fields, not as flags ("args lack --iteration").
printf '{"traceEvents": [{"ph": "X", "name": "forward-compute", "tid": 0, "ts": 0, "dur": 1, "args": {"microbatch_id": 0}}, {"ph": "X", "name": "backward-compute", "tid": 0, "ts": 1, "dur": 1, "args": {"iteration": 0, "microbatch_id": 0}}]}' >"$tmp/meg.json"
check 'meg.json: event 1 (forward-compute): args lack "iteration" or "step"' predict "$tmp/meg.json"
printf 'stage,chunk,microbatch,kind,duration_us\n0,0,0,F,1\n0,0,0,B,1\n' >"$tmp/nostep.csv"
check 'nostep.csv holds one step (no "step" column)' simulate --replay "$tmp/nostep.csv" --pp 1 -m 1 --step 1
# A replay draws nothing without jitter: its seed was taken, shown, and changed nothing.
check "--seed: a --replay's durations are measured, and nothing is drawn to seed" \
  simulate --replay "$tmp/nostep.csv" --pp 1 -m 1 --seed 5
check "--seed: a --replay's durations are measured" plan --replay "$tmp/nostep.csv" --pp 1 -m 1 --seed 5
# Nor does jitter:J0, which replayed the trace unchanged with its name in the header.
check "--workload: with --replay (and --tp 1) only jitter applies (jitter_p, jitter_floor_us, jitter_alpha or a jitter preset, on top of the measured durations); 'jitter:J0' draws no jitter" \
  simulate --replay "$tmp/nostep.csv" --pp 1 -m 1 --workload jitter:J0
check "--message-us: must be a number in [0, 1e+09], got -1" predict "$data/torch-pp2" --message-us -1
# NaN passes a range check: it was blamed on the workload ("lower the workload's times"), and
# with a CSV taken as no latency at all.
check "--message-us: must be a number in [0, 1e+09], got nan" predict "$data/torch-pp2" --message-us nan
# A stalled step's gaps, days long, inferred as its messages' latencies add up past what a step
# holds: the trace is named, and the remedy (it said "workload: ... lower the times").
{
  printf '['
  for m in $(seq 0 599); do printf '{"ph":"X","name":"PP:0F%d","ts":%d,"dur":1,"pid":0,"tid":1},' $m $m; done
  for m in $(seq 0 599); do printf '{"ph":"X","name":"PP:1F%d","ts":%d,"dur":1,"pid":1,"tid":1},{"ph":"X","name":"PP:1B%d","ts":%d,"dur":1,"pid":1,"tid":1},' $m $((5000000000000 + 4 * m)) $m $((5000000000000 + 4 * m + 2)); done
  for m in $(seq 0 598); do printf '{"ph":"X","name":"PP:0B%d","ts":%d,"dur":1,"pid":0,"tid":1},' $m $((9000000000000 + 2 * m)); done
  printf '{"ph":"X","name":"PP:0B599","ts":9000000001198,"dur":1,"pid":0,"tid":1}]'
} >"$tmp/stalled.json"
check "stalled.json: the step: its 2400 tasks add up to" predict "$tmp/stalled.json"
check "its messages' latencies were inferred from the gaps between tasks; give them (--message-us)" predict "$tmp/stalled.json"
# A CSV holds no recorded order: predict said "invalid JSON".
printf 'stage,chunk,microbatch,kind,duration_us\n0,0,0,F,1\n' >"$tmp/durations.csv"
check "'$tmp/durations.csv' is not a trace (.json, .json.gz or a directory of them): predict replays a step's recorded order, which a CSV of durations does not hold" predict "$tmp/durations.csv"
# Another file is not told it is a CSV.
: >"$tmp/t.svg"
check "TRACE: '$tmp/t.svg' is not a trace (.json, .json.gz or a directory of them)" predict "$tmp/t.svg"
grep -q "CSV" "$tmp/err" && { echo "FAIL: an SVG told it is a CSV"; fails=$((fails + 1)); }
# A header alone: "--step: ... has no step -1; its last is -1" without --step.
printf 'step,stage,chunk,microbatch,kind,duration_us\n' >"$tmp/header.csv"
check "header.csv: no rows after its header" simulate --replay "$tmp/header.csv" --pp 2 -m 4
mkdir -p "$tmp/empty"
check "holds no .json or .json.gz trace file" predict "$tmp/empty"
"$rrfp" simulate --pp 3 -m 6 --workload language --hint 1f1b --policy fixed \
  --trace "$tmp/own.json" >/dev/null || { echo "FAIL: simulate --trace"; fails=$((fails + 1)); }
"$rrfp" predict "$tmp/own.json" --json - >"$tmp/predict.json" 2>"$tmp/predict.err" ||
  { echo "FAIL: predict"; cat "$tmp/predict.err"; fails=$((fails + 1)); }
grep -q '"reproduction_error": 0.0' "$tmp/predict.json" ||
  { echo "FAIL: predict of rrfp's own trace:"; cat "$tmp/predict.json"; fails=$((fails + 1)); }
# A recorded order no step can have run (a backward moved before its forward): the trace's
# fault, named; its replay deadlocked and predict said "run failed", exit 1.
/usr/bin/python3 - "$tmp/own.json" "$tmp/impossible.json" <<'PY'
import json, sys
trace = json.load(open(sys.argv[1]))
events = trace["traceEvents"] if isinstance(trace, dict) else trace
next(e for e in events if e.get("name") == "B c2 m5")["ts"] = 0
json.dump(trace, open(sys.argv[2], "w"))
PY
check "the trace's recorded order: stage 2: task B c2 m5 comes before F c2 m5, which it depends on" predict "$tmp/impossible.json"
# TP=2: the measured step ends with the step's last collective, at 3 ms (F 0-0.5, collective
# 0.5-1.5, B 1.5-2, collective 2-3): it ended at the last compute, 2 ms, and the exact replay read
# +50%.
printf '{"tp_sigma": 0, "tp_collective_us": 1000, "coord_latency_us": 0}' >"$tmp/col.json"
"$rrfp" simulate --pp 1 -m 1 --tp 2 --workload uniform --workload-file "$tmp/col.json" \
  --hint 1f1b --policy fixed --split-backward off --trace "$tmp/col-trace.json" >/dev/null &&
  "$rrfp" predict "$tmp/col-trace.json" --json - >"$tmp/col-predict.json" 2>&1 &&
  grep -q '"measured_ms": 3.0,' "$tmp/col-predict.json" &&
  grep -q '"reproduction_error": 0.0' "$tmp/col-predict.json" ||
  { echo "FAIL: predict of a TP=2 trace:"; cat "$tmp/col-predict.json"; fails=$((fails + 1)); }
# A workload file's TP latency where the replayed trace measured its own was taken and ignored
# (the file's 100 us or 3000 us replayed the same step): refused, naming the file and field.
printf '{"tp_collective_us": 100}' >"$tmp/col100.json"
printf '{"coord_latency_us": 500}' >"$tmp/coord500.json"
check "--workload-file: '$tmp/col100.json' sets tp_collective_us, but the replayed trace measured the TP collective's time" \
  simulate --replay "$tmp/col-trace.json" --pp 1 -m 1 --tp 2 --split-backward off --hint 1f1b --policy fixed --workload-file "$tmp/col100.json"
# A CSV of a TP=2 step holds no collective: replayed with the workload's without a word, a
# `train --tp 2` step's fixed order came out 52% short. Said, unless a workload file sets it.
printf 'stage,chunk,microbatch,kind,duration_us,tp_rank\n0,0,0,F,1,0\n0,0,0,B,1,0\n0,0,0,F,1,1\n0,0,0,B,1,1\n' \
  >"$tmp/tp2.csv"
for file in "" "$tmp/col100.json"; do
  "$rrfp" simulate --replay "$tmp/tp2.csv" --pp 1 -m 1 --tp 2 --split-backward off --hint 1f1b \
    --policy fixed ${file:+--workload-file "$file"} >/dev/null 2>"$tmp/tp2.err" ||
    { echo "FAIL: a TP=2 CSV replay: $(cat "$tmp/tp2.err")"; fails=$((fails + 1)); }
  said=$(grep -c "records no TP collective (a CSV holds the tasks' durations alone)" "$tmp/tp2.err")
  [ "$said" = "$([ -z "$file" ] && echo 1 || echo 0)" ] ||
    { echo "FAIL: a TP=2 CSV replay, file '$file': $(cat "$tmp/tp2.err")"; fails=$((fails + 1)); }
done
# The coordination is a ready run's to measure (a fixed list's ranks each follow it).
printf '{"tp_sigma": 0, "coord_latency_us": 100}' >"$tmp/coord100.json"
"$rrfp" simulate --pp 2 -m 4 --tp 2 --workload uniform --workload-file "$tmp/coord100.json" \
  --hint 1f1b --policy ready --trace "$tmp/coord-trace.json" >/dev/null
check "--workload-file: '$tmp/coord500.json' sets coord_latency_us, but the replayed trace measured the TP coordination's latency" \
  simulate --replay "$tmp/coord-trace.json" --pp 2 -m 4 --tp 2 --hint 1f1b --policy fixed --workload-file "$tmp/coord500.json"
# A TP 2 trace read at --tp 3 lacks tp rank 2's tasks: the flags to give it its shape name --tp.
check "give that one (--pp, --vpp, --microbatches, --tp)" predict "$tmp/col-trace.json" --tp 3
# A duration past the limit by less than %.10g shows read "1000000000 us".
printf 'stage,chunk,microbatch,kind,duration_us\n0,0,0,F,1000000000.0004\n0,0,0,B,1\n' >"$tmp/over.csv"
check "over.csv:2: column duration_us: a task or message of 1000000000.0004 us; the most one may take is 1e+09 us" \
  simulate --replay "$tmp/over.csv" --pp 1 -m 1 --split-backward off
# A task of a rank at the boundary of back-to-back profiler steps is the later step's: each of
# three steps of 6 ms replays to itself (the earlier step took it: "appears twice in one step",
# and the later one deadlocked).
mkdir -p "$tmp/b2b"
for rank in 0 1; do
  /usr/bin/python3 - "$rank" >"$tmp/b2b/rank$rank.json" <<'PY'
import json, sys
r = int(sys.argv[1])
names = [["PP:0F0", "PP:0F1", "PP:0B0", "PP:0B1"], ["PP:1F0", "PP:1B0", "PP:1F1", "PP:1B1"]][r]
at = [[0, 1, 3, 5], [1, 2, 3, 4]][r]
ev = []
for step in range(3):
    ev.append({"ph": "X", "name": f"ProfilerStep#{step}", "ts": 6000 * step, "dur": 6000, "pid": 1, "tid": 1})
    ev += [{"ph": "X", "name": n, "ts": 6000 * step + 1000 * a, "dur": 1000, "pid": 1, "tid": 1} for n, a in zip(names, at)]
print(json.dumps({"traceEvents": ev, "distributedInfo": {"rank": r}}))
PY
done
for step in 0 1 2; do
  "$rrfp" predict "$tmp/b2b" --step $step --json - >"$tmp/b2b.out" 2>&1 &&
    grep -q '"measured_ms": 6.0,' "$tmp/b2b.out" && grep -q '"replayed_ms": 6.0,' "$tmp/b2b.out" ||
    { echo "FAIL: predict of back-to-back step $step:"; cat "$tmp/b2b.out"; fails=$((fails + 1)); }
done
# A --limit not above the recorded memory's (P=3 1F1B: 3) is left out with a note, not silently;
# a hint given twice is refused (its rows printed twice).
"$rrfp" predict "$tmp/own.json" --limit 2 >"$tmp/limit.txt" 2>&1 &&
  grep -qF "(skipped: the rows at the larger limit 2: it is not above the memory-neutral limit 3" "$tmp/limit.txt" ||
  { echo "FAIL: predict --limit 2:"; cat "$tmp/limit.txt"; fails=$((fails + 1)); }
check "--hints: 'bf' is given twice" predict "$tmp/own.json" --hints bf,adaptive,bf
# BFW, in the default --hints, on a step of whole backwards: the note names --hints and says why
# (it said "--hint bfw: needs --split-backward on", flags predict does not take).
"$rrfp" predict "$data/torch-pp2" >"$tmp/bfw.txt" 2>&1 &&
  grep -qF "(skipped: --hints bfw: its rows defer W tasks, and the step is replayed with its backward whole" "$tmp/bfw.txt" ||
  { echo "FAIL: predict's note on bfw:"; cat "$tmp/bfw.txt"; fails=$((fails + 1)); }
# One task's chunk mistyped (9 in a 3-stage trace): the event is named, not only the flags.
/usr/bin/python3 -c 'import json, sys
j = json.load(open(sys.argv[1])); ev = j["traceEvents"] if isinstance(j, dict) else j
i = next(k for k, e in enumerate(ev) if e.get("ph") == "X" and "chunk" in e.get("args", {}))
ev[i]["args"]["chunk"] = 9; json.dump(j, open(sys.argv[2], "w")); print(i + 1)' \
  "$tmp/own.json" "$tmp/oob.json" >"$tmp/oob.at"
check "10 chunks on 3 stages (chunk 9 first at $tmp/oob.json: event $(cat "$tmp/oob.at")): give the shape (--pp, --vpp), or mend the trace" predict "$tmp/oob.json"
# The same with TP and messages that cost nothing (the uniform workload): such a message is in
# the trace as taking 0 us. Left out, it read as not timed and was inferred from its consumer's
# start, which holds the TP ranks' skew: the replays came out 1.1-4% long. (The replay takes no
# --workload: the trace times its collectives and coordination, and no preset but jitter applies.)
for flags in "--policy fixed --hint 1f1b" "--hint bf --comm blocking"; do
  tp=(--pp 4 -m 4 --tp 2 $flags)
  "$rrfp" simulate "${tp[@]}" --seed 3 --workload uniform --trace "$tmp/tp.json" --json "$tmp/tp-sim.json" >/dev/null &&
    "$rrfp" simulate "${tp[@]}" --replay "$tmp/tp.json" --json "$tmp/tp-replay.json" >/dev/null ||
    { echo "FAIL: simulate ${tp[*]} and its replay"; fails=$((fails + 1)); }
  a=$(grep -m1 '"makespan_ms"' "$tmp/tp-sim.json") b=$(grep -m1 '"makespan_ms"' "$tmp/tp-replay.json")
  [ -n "$a" ] && [ "$a" = "$b" ] ||
    { echo "FAIL: ${tp[*]}: simulated $a, replayed $b"; fails=$((fails + 1)); }
done
# predict takes the TP coordination's latency from the trace too (a follower's least lag behind
# its leader), where it took none: the same trace predicted its step -1.3% short.
"$rrfp" simulate --pp 4 -m 4 --tp 2 --workload uniform --seed 3 --policy fixed --hint 1f1b \
  --trace "$tmp/tp.json" >/dev/null &&
  "$rrfp" predict "$tmp/tp.json" --json - >"$tmp/tp-predict.json" 2>"$tmp/predict.err" ||
  { echo "FAIL: predict of a TP trace"; cat "$tmp/predict.err"; fails=$((fails + 1)); }
grep -q '"reproduction_error": 0.0' "$tmp/tp-predict.json" ||
  { echo "FAIL: predict of a TP trace:"; grep reproduction "$tmp/tp-predict.json"; fails=$((fails + 1)); }
# A ready run's blocking step replays with its rendezvous (replayed async, the simulator's own
# trace read 5.8% short): within 1% here; interleaved too, under the ready policy ranked by the
# recorded order (as a fixed order it deadlocked, and was replayed async, 3-14% short, or came
# out long: +8.5% at P=4 V=2 M=8).
"$rrfp" simulate --pp 4 -m 8 --workload language --comm blocking --trace "$tmp/rb.json" >/dev/null
"$rrfp" predict "$tmp/rb.json" --step 1 --json - >"$tmp/rb-predict.json" &&
  /usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1]))
assert j['recorded_comm'] == 'blocking' and abs(j['reproduction_error']) < 0.01, j" "$tmp/rb-predict.json" ||
  { echo "FAIL: predict of a ready blocking step"; fails=$((fails + 1)); }
"$rrfp" simulate --pp 4 -m 8 --vpp 2 --comm blocking --trace "$tmp/rbv.json" >/dev/null
"$rrfp" simulate --pp 4 -m 8 --vpp 2 --hint interleaved-1f1b --policy ready --comm blocking \
  --workload multimodal --trace "$tmp/rbi.json" >/dev/null
for t in rbv:1 rbi:0; do
  "$rrfp" predict "$tmp/${t%%:*}.json" --step "${t#*:}" --json - >"$tmp/rbv-predict.json" &&
    /usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1]))
assert j['recorded_comm'] == 'blocking' and abs(j['reproduction_error']) < 1e-6, j" "$tmp/rbv-predict.json" ||
    { echo "FAIL: predict of the interleaved ready blocking step $t"; fails=$((fails + 1)); }
done
# The ranks of a TP group run one order: a trace whose ranks ran two (stage 1's rank 1 with
# two forwards swapped) is refused, naming where they part (replayed in rank 0's order).
"$rrfp" simulate --pp 2 -m 4 --tp 2 --workload uniform --hint gpipe --policy fixed \
  --trace "$tmp/tp2.json" >/dev/null
/usr/bin/python3 - "$tmp/tp2.json" "$tmp/tp2-swapped.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
ev = t["traceEvents"] if isinstance(t, dict) else t
pids = {e["pid"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"
        and e["args"]["name"].endswith(" / stage 1") and e["args"]["name"].startswith("fixed gpipe (async)")}
mine = [e for e in ev if e.get("ph") == "X" and e.get("pid") in pids and e.get("tid") == 1
        and e.get("args", {}).get("kind") == "F" and e["args"].get("microbatch") in (1, 2)]
assert len(mine) == 2, mine
mine[0]["ts"], mine[1]["ts"] = mine[1]["ts"], mine[0]["ts"]
json.dump(t, open(sys.argv[2], "w"))
PY
check "stage 1: tp rank 1 ran F c1 m2 where tp rank 0 ran F c1 m1 (its task 2); the ranks of a tensor-parallel group run one order" predict "$tmp/tp2-swapped.json"
# A profiler trace whose ranks --tp does not divide into stages says so (it said the trace
# "holds no task to tell its shape by").
check "2 rank(s) with task spans, which --tp 3 does not divide into stages" predict "$data/torch-pp2" --tp 3
# A CSV without send_us times no message: --message-us times them (it was taken and ignored, every
# message free: 9.00 ms either way); with the column it has none to time, and is refused. A send_us
# on a task whose output no task of the shape takes came from a stage the shape lacks (the CSV of
# an 8-stage step cut to 4 stages replayed as a 4-stage pipeline, 27% short), as in a trace.
printf 'stage,chunk,microbatch,kind,duration_us\n0,0,0,F,1000\n0,0,1,F,1000\n1,1,0,F,1000\n1,1,1,F,1000\n1,1,0,B,2000\n1,1,1,B,2000\n0,0,0,B,2000\n0,0,1,B,2000\n' >"$tmp/untimed.csv"
msg=(simulate --pp 2 -m 2 --replay "$tmp/untimed.csv" --hint 1f1b --policy fixed --split-backward off)
for us in 0:9.00 2000:13.00; do
  "$rrfp" "${msg[@]}" --message-us "${us%%:*}" | grep -q "^fixed 1f1b (async) *${us#*:} " ||
    { echo "FAIL: a CSV replay with --message-us ${us%%:*}: not ${us#*:} ms"; fails=$((fails + 1)); }
done
sed '1s/$/,send_us/; 2,$s/$/,0/' "$tmp/untimed.csv" >"$tmp/timed.csv"
for cmd in simulate plan; do
  check "--message-us: must be a number in [0, 1e+09], got nan" $cmd --pp 2 -m 2 \
    --replay "$tmp/untimed.csv" --split-backward off --message-us nan
done
check "timed.csv: its send_us column times every message, so --message-us has none to time" simulate --pp 2 -m 2 --replay "$tmp/timed.csv" --split-backward off --message-us 5
sed '5s/,0$/,7/' "$tmp/timed.csv" >"$tmp/lacked.csv"  # the last chunk's F c1 m1
check "lacked.csv:5: send_us says its output went to another stage, but no task of P=2 V=1 takes it" simulate --pp 2 -m 2 --replay "$tmp/lacked.csv" --split-backward off
"$rrfp" simulate --pp 2 -m 2 --replay "$tmp/timed.csv" --split-backward off >/dev/null ||
  { echo "FAIL: a CSV whose send_us is 0 where no task takes the output"; fails=$((fails + 1)); }
# A trace named in capitals is a trace (t.JSON was read as a CSV: "line 1 has 54 KiB"); a
# gzipped CSV is named as such (its first bytes were "unknown column '\x1f\x8b...'").
cp "$tmp/rb.json" "$tmp/RB.JSON"
"$rrfp" predict "$tmp/RB.JSON" --step 1 >/dev/null ||
  { echo "FAIL: a trace named .JSON"; fails=$((fails + 1)); }
gzip -c "$tmp/untimed.csv" >"$tmp/untimed.csv.gz"
check "untimed.csv.gz: a gzip file: a replay CSV is read as text (gunzip it first)" simulate --pp 2 -m 2 --replay "$tmp/untimed.csv.gz" --split-backward off
# A recorded wait is bounded as a task is: 1e20 us overflowed into a step of -9.2e12 ms
# (predict), or was dropped without a word (a replay).
"$rrfp" simulate --pp 2 -m 2 --tp 2 --workload uniform --hint 1f1b --policy ready \
  --tp-protocol agree --trace "$tmp/tp.json" >/dev/null
/usr/bin/python3 - "$tmp/tp.json" "$tmp/tp20.json" <<'PY'
import json, sys
trace = json.load(open(sys.argv[1]))
waits = [e for e in trace["traceEvents"] if e.get("name") == "blocked: collective"]
assert waits, "no collective wait recorded"
for e in waits:
    e["dur"] = 1e20
json.dump(trace, open(sys.argv[2], "w"))
PY
check 'field "dur" is 1e+20; a wait of at most 1e9 (us, 1000 s) is read' predict "$tmp/tp20.json"
check 'field "dur" is 1e+20; a wait of at most 1e9' simulate --replay "$tmp/tp20.json" --tp 2 --hint bf --policy ready
# A NUL in a quoted value is shown, not the message's end ("column send_us: '0.0" was all).
printf 'stage,chunk,microbatch,kind,duration_us,send_us\n0,0,0,F,1,0.0\0\n' >"$tmp/nul.csv"
check "nul.csv:2: column send_us: '0.0\x00' is not a number" simulate --pp 1 -m 1 --replay "$tmp/nul.csv"
# Every rule asked for skipped: refused, where the report said no rule beats the recorded order.
"$rrfp" simulate --pp 2 -m 4 --hint 1f1b --trace "$tmp/whole.json" >/dev/null
check "--hints: none of the rules given can run on this step (bfw: its rows defer W tasks" predict "$tmp/whole.json" --hints bfw
# The trace's own P given keeps its placement (a V-shaped trace was refused under --pp 2), and
# with the JSON on stdout the report goes to stderr (it was left out).
"$rrfp" simulate --pp 2 --vpp 2 --placement vshape -m 4 --hint bf --policy ready \
  --trace "$tmp/vs.json" >/dev/null
"$rrfp" predict "$tmp/vs.json" --pp 2 --vpp 2 >/dev/null ||
  { echo "FAIL: predict of a V-shaped trace with its own --pp"; fails=$((fails + 1)); }
"$rrfp" predict "$tmp/vs.json" --json - 2>"$tmp/err" >/dev/null && grep -q "memory-neutral limit" "$tmp/err" ||
  { echo "FAIL: predict --json - wrote no report to stderr"; fails=$((fails + 1)); }
# A trace whose stage 1 starts its tasks a millisecond before their inputs were made (clocks
# that disagree, a hand edit) is said to be so beside the measured step (it read +45% as the
# twin's error, and a 1.26x gain, without a word); its own clocks are not.
"$rrfp" simulate --pp 2 -m 4 --hint 1f1b --trace "$tmp/causal.json" >/dev/null
/usr/bin/python3 - "$tmp/causal.json" "$tmp/early.json" <<'PY'
import json, sys
trace = json.load(open(sys.argv[1]))
for e in trace["traceEvents"]:
    if e.get("ph") == "X" and e.get("pid") == 1:
        e["ts"] -= 1000
    e.get("args", {}).pop("send_us", None)
json.dump(trace, open(sys.argv[2], "w"))
PY
"$rrfp" predict "$tmp/causal.json" 2>&1 | grep -q "note: " &&
  { echo "FAIL: predict notes early inputs in a trace of one clock"; fails=$((fails + 1)); }
"$rrfp" predict "$tmp/early.json" 2>&1 | grep -q "note: .* cross-stage inputs start before the trace says their producer ended" ||
  { echo "FAIL: predict of a trace whose inputs start before they are made: no note"; fails=$((fails + 1)); }
# Bytes after a gzip stream that start no other member were dropped without a word (the same
# JSON uncompressed, with them, was refused).
"$rrfp" simulate --pp 2 -m 4 --hint bf --policy ready --trace "$tmp/whole.json" >/dev/null
{ gzip -c "$tmp/whole.json"; echo "GARBAGE"; } >"$tmp/junk.json.gz"
check "junk.json.gz: 8 byte(s) after the gzip stream that start no other gzip member" predict "$tmp/junk.json.gz"
# Zero bytes after the stream are padding, skipped as gzip and Python skip them.
{ gzip -c "$tmp/whole.json"; head -c 512 /dev/zero; } >"$tmp/padded.json.gz"
"$rrfp" predict "$tmp/padded.json.gz" >/dev/null ||
  { echo "FAIL: a gzip trace padded with zero bytes is refused"; fails=$((fails + 1)); }
# One trace in two gzip members (as `cat a.gz b.gz` writes) is read whole.
half=$(($(wc -c <"$tmp/whole.json") / 2))
{ head -c $half "$tmp/whole.json" | gzip -c; tail -c +$((half + 1)) "$tmp/whole.json" | gzip -c; } \
  >"$tmp/two.json.gz"
"$rrfp" predict "$tmp/two.json.gz" >/dev/null ||
  { echo "FAIL: a trace in two gzip members is not read whole"; fails=$((fails + 1)); }
# An id past 1e9 was told a time's range ("at most 1e13 (us) is read").
sed 's/"microbatch": *3/"microbatch": 9223372036854775808/' "$tmp/whole.json" >"$tmp/big-id.json"
check "field \"microbatch\" is 9223372036854775808; a whole number in [0, 1e9] is read" predict "$tmp/big-id.json"
# How to replay a recording without W tasks was added to every refusal of such a step, a TP or
# a duplicate one among them (whose remedy it is not).
"$rrfp" simulate --pp 2 -m 4 --hint bf --policy ready --split-backward off \
  --trace "$tmp/nosplit.json" >/dev/null
check "lacks tasks this shape needs" simulate --replay "$tmp/nosplit.json" --pp 2 -m 4 --step 0
check "replay it with --split-backward off" simulate --replay "$tmp/nosplit.json" --pp 2 -m 4 --step 0
"$rrfp" simulate --replay "$tmp/nosplit.json" --pp 2 -m 4 --tp 2 --step 0 2>&1 |
  grep -q "split-backward" && { echo "FAIL: a TP refusal says to turn the split backward off"; fails=$((fails + 1)); }
# A Megatron timeline on the system's thread ids (2^20 and more), its stages named by thread:
# its shape was probed from thread 0's name, and the reader refused "rank pp 1 tp 0 is outside
# the shape (pp 1, tp 1)", a --pp the user had not typed.
/usr/bin/python3 - "$tmp/meg-tids.json" <<'PY'
import json, sys
tid = {0: 3000000, 1: 3000001}
ev = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": tid[s], "args": {"name": f"pp {s} tp 0"}}
      for s in tid]
for s, kind, mb, ts, dur in [(0, "forward", 0, 0, 10), (0, "forward", 1, 10, 10),
                             (1, "forward", 0, 12, 10), (1, "backward", 0, 22, 20),
                             (1, "forward", 1, 42, 10), (1, "backward", 1, 52, 20),
                             (0, "backward", 0, 44, 20), (0, "backward", 1, 74, 20)]:
    ev.append({"name": f"{kind}-compute", "ph": "X", "pid": 0, "tid": tid[s], "ts": ts,
               "dur": dur, "args": {"iteration": 0, "microbatch_id": mb}})
json.dump({"traceEvents": ev}, open(sys.argv[1], "w"))
PY
"$rrfp" predict "$tmp/meg-tids.json" 2>&1 | grep -q "(megatron, iteration 0): P=2 V=1 M=2 TP=1" ||
  { echo "FAIL: a Megatron trace on large thread ids: $("$rrfp" predict "$tmp/meg-tids.json" 2>&1 | head -1)"
    fails=$((fails + 1)); }
# A merged legacy file whose pids name their ranks, rank 1's events first: its stages were
# taken in order of appearance, swapped, and the clocks' alignment hid it (0 messages seen).
printf '[{"name":"Forward 0","ph":"X","ts":11,"dur":10,"pid":"rank1","tid":1},{"name":"Backward 0","ph":"X","ts":21,"dur":18,"pid":"rank1","tid":1},{"name":"Forward 0","ph":"X","ts":0,"dur":10,"pid":"rank0","tid":1},{"name":"Backward 0","ph":"X","ts":40,"dur":20,"pid":"rank0","tid":1}]' >"$tmp/merged.json"
"$rrfp" predict "$tmp/merged.json" --hints bf --limit 0 2>&1 |
  grep -q "0 of 2 messages timed by the trace, 2 seen from their consumers' starts" ||
  { echo "FAIL: a merged file's ranks by their pids' names"; fails=$((fails + 1)); }
# A trace of several runs whose first is whole but unreadable (a task twice, a send of 1e12 us,
# a task as a begin event): its fault is named; passed over, the next run was replayed in its
# place, exit 0.
"$rrfp" simulate --pp 4 -m 4 --workload uniform --trace "$tmp/runs.json" >/dev/null
/usr/bin/python3 - "$tmp/runs.json" "$tmp" <<'PY'
import copy, json, sys
d = json.load(open(sys.argv[1]))
tasks = lambda t: [e for e in t["traceEvents"] if e.get("ph") == "X" and "kind" in e.get("args", {})]
for name, change in (("twice", lambda t: t["traceEvents"].append(copy.deepcopy(tasks(t)[0]))),
                     ("send", lambda t: tasks(t)[0]["args"].update(send_us=1e12)),
                     ("begin", lambda t: tasks(t)[0].update(ph="B"))):
    t = copy.deepcopy(d)
    change(t)
    json.dump(t, open(f"{sys.argv[2]}/runs-{name}.json", "w"))
PY
check "runs-twice.json (run 'fixed 1f1b (blocking)'): task F c0 m0 appears twice in one step" predict "$tmp/runs-twice.json"
check "runs-send.json (run 'fixed 1f1b (blocking)'): task F c0 m0: send_us: a task or message of 1e+12 us" predict "$tmp/runs-send.json"
check "runs-begin.json: event 13: a task with ph \"B\"; a replay reads complete spans" simulate --pp 4 -m 4 --split-backward off --replay "$tmp/runs-begin.json"
# A run setting that one stage gives and the others lack: the one's value was taken for the run.
/usr/bin/python3 - "$tmp/runs.json" "$tmp/ordered-one.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for e in d["traceEvents"]:
    if e.get("name") == "process_name":
        del e["args"]["ordered_forwards"]
        if e["args"]["name"].endswith("(blocking) / stage 2"):
            e["args"]["ordered_forwards"] = True
json.dump(d, open(sys.argv[2], "w"))
PY
check "field \"ordered_forwards\" is given by 1 of the 4 stages of run 'fixed 1f1b (blocking)'" predict "$tmp/ordered-one.json"
# Megatron args naming one field twice, in disagreement: the second name was dropped unsaid.
printf '[{"ph":"X","name":"forward-compute","tid":0,"ts":0,"dur":10,"args":{"iteration":0,"step":7,"microbatch_id":0}},{"ph":"X","name":"backward-compute","tid":0,"ts":10,"dur":20,"args":{"iteration":0,"microbatch_id":0}}]' >"$tmp/two-steps.json"
check "two-steps.json: event 1 (forward-compute): args give \"iteration\" 0 but \"step\" 7" predict "$tmp/two-steps.json"
# A step span whose number is not one: skipped, its tasks were read as between steps and the
# next step replayed, exit 0.
mkdir -p "$tmp/badstep"
/usr/bin/python3 - "$data/torch-pp2" "$tmp/badstep" <<'PY'
import gzip, json, sys
for rank in (0, 1):
    events = json.load(gzip.open(f"{sys.argv[1]}/rank{rank}.json.gz"))
    for e in events:
        if rank == 0 and e.get("name") == "ProfilerStep#1":
            e["name"] = "ProfilerStep#one"
    json.dump(events, open(f"{sys.argv[2]}/rank{rank}.json", "w"))
PY
check "rank0.json: event 1: span 'ProfilerStep#one' is no step span: ProfilerStep#<N>" predict "$tmp/badstep"
# A merged file's rank with its steps but no task spans timed nothing: the pipeline was replayed
# without its stage (P=2 of 3), exit 0.
printf '[{"name":"ProfilerStep#0","ph":"X","ts":0,"dur":100,"pid":"rank0","tid":1},{"name":"Forward 0","ph":"X","ts":0,"dur":10,"pid":"rank0","tid":1},{"name":"Backward 0","ph":"X","ts":60,"dur":20,"pid":"rank0","tid":1},{"name":"ProfilerStep#0","ph":"X","ts":0,"dur":100,"pid":"rank1","tid":1},{"name":"ProfilerStep#0","ph":"X","ts":0,"dur":100,"pid":"rank2","tid":1},{"name":"Forward 0","ph":"X","ts":21,"dur":10,"pid":"rank2","tid":1},{"name":"Backward 0","ph":"X","ts":31,"dur":18,"pid":"rank2","tid":1}]' >"$tmp/untimed-rank.json"
# ...but a device's process holding the GPU's copies of the steps alone is no rank.
printf '{"traceEvents":[{"name":"ProfilerStep#0","ph":"X","ts":0,"dur":100,"pid":100,"tid":1},{"name":"PP:0F0","ph":"X","ts":0,"dur":10,"pid":100,"tid":1},{"name":"PP:0B0","ph":"X","ts":20,"dur":20,"pid":100,"tid":1},{"name":"ProfilerStep#0","ph":"X","ts":0,"dur":100,"pid":0,"tid":7,"cat":"gpu_user_annotation"}]}' >"$tmp/device-steps.json"
"$rrfp" predict "$tmp/device-steps.json" >/dev/null 2>&1 ||
  { echo "FAIL: a device's copies of the steps taken for a rank: $("$rrfp" predict "$tmp/device-steps.json" 2>&1 | tail -1)"; fails=$((fails + 1)); }
check "untimed-rank.json: process \"rank1\" is a rank of the pipeline (profiler steps or a rank's name) without task spans" predict "$tmp/untimed-rank.json"
# A large replay is held as its text and a few bytes a row (a string per cell held 32 times the
# file: 256 MiB took 8.3 GB before its third line was refused). 64 MiB under a 1 GB address
# space: its duplicate row is named (it ran out of memory, exit 1).
if (ulimit -v 1000000 && "$rrfp" --help >/dev/null 2>&1); then
  /usr/bin/python3 -c "import sys; row = '0,0,0,F,1\\n'
sys.stdout.write('stage,chunk,microbatch,kind,duration_us\\n' + row * (64 * 2**20 // len(row)))" \
    >"$tmp/big.csv"
  (ulimit -v 1000000 && "$rrfp" simulate --pp 4 -m 8 --replay "$tmp/big.csv" >/dev/null \
    2>"$tmp/big.err")
  rc=$?
  [ $rc -eq 2 ] && grep -qx "rrfp: error: $tmp/big.csv:3: task F c0 m0 appears twice" "$tmp/big.err" ||
    { echo "FAIL: a 64 MiB replay under 1 GB: rc=$rc $(head -c 300 "$tmp/big.err")"; fails=$((fails + 1)); }
  rm -f "$tmp/big.csv"
fi
echo "cli bad-replay checks: $fails failed"
[ "$fails" -eq 0 ]
