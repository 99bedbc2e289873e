#!/usr/bin/env bash
# Commands that feed each other, as a user chains them: a run's trace into `plan`, the plan's
# hint file back into `simulate --policy fixed`, a durations CSV with W tasks into `simulate`.
# `split_backward` auto must follow what each command is given (a plan: its replay's W tasks;
# the plan's hint file: its declaration), with no flag added; a run that does not split
# replays a W's duration as part of its B's.
# Usage: cli_flows.sh path/to/rrfp
set -euo pipefail
rrfp=$1
py=/usr/bin/python3
data=$(cd "$(dirname "$0")" && pwd)/data
scripts=$(cd "$(dirname "$0")/../scripts" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail() {
  echo "FAIL: $*"
  exit 1
}
field() { # field FILE EXPR: a value of the JSON report
  "$py" -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"
}

# plan_replays NAME TRACE SHAPE... -- PLAN_FLAGS...: `plan --replay TRACE` (report in NAME.txt,
# NAME.json, hint NAME-h.json), then its hint replayed by simulate under the fixed policy to the
# makespan the plan reported.
plan_replays() {
  local name=$1 trace=$2
  shift 2
  local shape=()
  while [ "$1" != -- ]; do shape+=("$1"); shift; done
  shift
  "$rrfp" plan "${shape[@]}" --replay "$trace" "$@" --out "$name-h.json" --json "$name.json" \
    >"$name.txt" || fail "plan --replay $trace ($name)"
  planned=$(field "$name.json" "j['plan']['makespan_ms']")
  "$rrfp" simulate "${shape[@]}" --replay "$trace" --hint "$name-h.json" --policy fixed \
    --json "$name-s.json" >/dev/null || fail "simulate --hint (the plan's file, $name)"
  local replayed
  replayed=$(field "$name-s.json" "j['runs'][0]['makespan_ms']")
  [ "$planned" = "$replayed" ] || fail "$name: plan made $planned ms, its hint replays to $replayed ms"
  echo "ok: $name: trace -> plan -> simulate --policy fixed: $planned ms both"
}

# A ready BFW run records W tasks; `plan` on its trace splits the backward by itself.
"$rrfp" run --pp 4 -m 8 --hint bfw --policy ready --seed 3 --trace t.json >/dev/null
plan_replays split t.json --pp 4 -m 8 -- --max-evaluations 40 --exact off
[ "$(field split.json "j['runs'][0]['split_backward']")" = True ] || fail "plan did not split"

# A step of ordered forwards is planned as one, as simulate replays it: the plan reordered the
# forwards and called 102.732 ms optimal, where its hint could not run (cyclic wait) and the
# optimum is 106.251 ms.
"$rrfp" simulate --pp 3 -m 4 --hint bfw --policy ready --ordered-forwards on --trace o.json >/dev/null
plan_replays ordered o.json --pp 3 -m 4 -- --max-evaluations 300
grep -q "(ordered forwards)" ordered.txt || fail "plan of ordered forwards: $(head -1 ordered.txt)"
# The header's W cap only where there are W tasks.
grep -q "W cap=" ordered.txt || fail "a split plan's header names no W cap: $(head -1 ordered.txt)"
"$rrfp" plan --pp 2 -m 4 --max-evaluations 10 >unsplit.txt
grep -q "split=off .*W cap" unsplit.txt && fail "an unsplit plan's header names a W cap"
# The TP protocol, as simulate's header gives it: --out tells to replay with the same one.
"$rrfp" plan --pp 2 -m 4 --tp 2 --tp-protocol agree --max-evaluations 10 >agree.txt
grep -q " TP=2 (agree)  workload=" agree.txt || fail "plan's header at TP 2: $(head -1 agree.txt)"

# The best line says "optimal" only where the exact search proved it, with the exact line's
# makespan; the heuristic alone proves nothing.
# A cap smaller than the first feasible start: the line names the flag, and why it ran past it
# (it said "the budget was spent", and 2 orders for a cap of 1), and the starts it skipped,
# counted among those that fit the shape: 8 of its 10 (it said 13, counting every hint's name).
"$rrfp" plan --pp 4 -m 8 --workload language --max-evaluations 1 --exact off >m.txt
grep -qF -- "search: --max-evaluations 1 was spent before 8 of the start points could be tried; it evaluated 2 orders, past the cap: a plan needs a feasible order" m.txt ||
  fail "plan --max-evaluations 1: $(grep search: m.txt)"
# --max-evaluations makes a plan the same on any machine only if the budget does not run out
# first: the report and the JSON say which stopped the search (a different plan came silently).
"$rrfp" plan --pp 4 -m 8 --max-evaluations 1000000 --budget 0.3 --exact off --json bud.json >bud.txt
grep -q "^search: its --budget of 0.3 s was spent after [0-9]* orders, before --max-evaluations 1000000: the result depends on this machine's speed" bud.txt ||
  fail "budget before the cap: $(grep '^search' bud.txt)"
[ "$(field bud.json "j['plan']['search_stopped_by']")" = budget ] || fail "budget before the cap in JSON"
# A budget spent before the start hints were tried says so in one line, not two.
"$rrfp" plan --pp 8 -m 32 --max-evaluations 1000000 --budget 0.001 --exact off >bud2.txt
[ "$(grep -c "^search: its --budget of 0.001 s was spent" bud2.txt)" = 1 ] ||
  fail "budget spent with starts skipped: $(grep '^search' bud2.txt)"
# A cap that stops the annealing is passed by the one evaluation that keeps its best: said, with
# the count (it read "201 orders" for --max-evaluations 200 and no word why).
"$rrfp" plan --pp 4 -m 8 --max-evaluations 200 --exact off --json cap.json >cap.txt
[ "$(field cap.json "j['plan']['search_stopped_by']")" = max_evaluations ] || fail "cap in JSON"
evaluated=$(field cap.json "j['plan']['evaluations']")
# A step without W tasks has no W cap: null, as the printed report leaves it out (it read P).
[ "$(field cap.json "j['plan']['max_pending_w']")" = None ] ||
  fail "max_pending_w without W tasks: $(field cap.json "j['plan']['max_pending_w']")"
[ "$evaluated" = 200 ] || grep -qF "search: --max-evaluations 200 stopped its annealing, and the best order found there was evaluated once more to be kept ($evaluated orders)" cap.txt ||
  fail "$evaluated orders for a cap of 200: $(grep '^search' cap.txt)"
"$rrfp" plan --pp 2 -m 3 --max-evaluations 40 --exact on >e.txt
grep -q "^exact: .*optimal (proven)" e.txt || fail "plan --pp 2 -m 3 --exact on: not proven"
best=$(sed -n 's/^best: *\([0-9.]*\) ms, optimal (proven by the exact search);.*/\1/p' e.txt)
[ -n "$best" ] && grep -q "^exact: *$best ms" e.txt || fail "best line: $(grep '^best' e.txt)"
"$rrfp" plan --pp 2 -m 3 --max-evaluations 40 --exact off >h.txt
grep "^best:" h.txt | grep -q optimal && fail "the heuristic alone said optimal: $(grep '^best' h.txt)"
echo "ok: plan's best line says optimal where the exact search proved it ($best ms)"
# An order that meets the lower bound (here the memory bound of --limit 1) is optimal: said so,
# and the exact search stops at once, proven. It went on to its node cap, "not proven", beside
# a gap of 0.0%.
"$rrfp" plan --pp 4 -m 8 --limit 1 --split-backward on --max-evaluations 3000 --exact on \
  --exact-nodes 200000 --json lb.json >lb.txt
grep -q "^exact: .*optimal (it meets the lower bound); 0 nodes" lb.txt || fail "bound met: $(grep '^exact' lb.txt)"
[ "$(field lb.json "j['plan']['optimal']")" = True ] || fail "bound met: not optimal in JSON"
"$rrfp" plan --pp 4 -m 8 --limit 1 --split-backward on --max-evaluations 3000 --exact off >lb2.txt
grep -q "^best: .*, optimal (it meets the lower bound); lower bound" lb2.txt ||
  fail "bound met without the exact search: $(grep '^best' lb2.txt)"
# A replay's plan names the step it replayed, as simulate does ("replay:t.json" alone).
grep -q "workload=replay:t.json step [0-9]* " <("$rrfp" plan --pp 4 -m 8 --replay t.json \
  --max-evaluations 10 --exact off) || fail "plan --replay: the header names no step"
# --split-backward auto follows the step replayed, not the file: the comparison's first run has
# no W tasks, its last (BFW) has (step 0 was refused: "the trace has no W tasks").
"$rrfp" simulate --pp 4 -m 8 --workload multimodal --trace cmp.json >/dev/null
for s in "0 off" "3 on"; do
  read -r st sp <<<"$s"
  grep -q "split=$sp TP=1  workload=replay:cmp.json step $st " <("$rrfp" plan --pp 4 -m 8 \
    --replay cmp.json --step "$st" --max-evaluations 10 --exact off 2>&1) ||
    fail "plan --replay of step $st: not split=$sp"
done

# An exact search stopped early names what stopped it: its node cap (at exactly that node),
# or its budget; it said "not proven within the budget" when the cap had stopped it.
"$rrfp" plan --pp 4 -m 8 --max-evaluations 40 --exact on --exact-nodes 5000 --json c.json >c.txt
grep -q "^exact: .*not proven: stopped at its cap of 5000 nodes (--exact-nodes); 5000 nodes" c.txt ||
  fail "node cap: $(grep '^exact' c.txt)"
[ "$(field c.json "j['plan']['exact']['stopped_by']")" = "node cap" ] || fail "node cap in JSON"
"$rrfp" plan --pp 4 -m 8 --max-evaluations 40 --exact on --exact-nodes 0 --exact-budget 0.2 >b.txt
grep -q "^exact: .*not proven: stopped when its 0.2 s were spent (--exact-budget)" b.txt ||
  fail "budget: $(grep '^exact' b.txt)"
echo "ok: an unproven exact search names its node cap or its budget"

# Messages the exact search cannot time (shared links, one copy at a time, a slowdown while two
# move, an idle rank's wake-up; what `rrfp calibrate --transport mpi` writes): --exact auto
# leaves the step to the heuristic and says why, --exact on is refused naming the field, and the
# plan's makespan is what its hint simulates to. The exact search timed each message alone and
# plan failed (exit 1) on a best order that simulated slower than it had found.
for spec in 'comm_links 3 {"comm_links":1,"comm_latency_us":500,"comm_bandwidth_gbps":1}' \
  'comm_serial_receive 3 {"comm_serial_receive":true,"comm_latency_us":500,"comm_bandwidth_gbps":1}' \
  'comm_two_slowdown 3 {"comm_two_slowdown":3,"comm_latency_us":500,"comm_bandwidth_gbps":1}' \
  'comm_wake_us 2 {"comm_wake_us":300,"comm_latency_us":500}'; do
  read -r name pp load <<<"$spec"
  echo "$load" >msg.json
  shape=(--pp "$pp" -m 4 --workload-file msg.json)
  "$rrfp" plan "${shape[@]}" --max-evaluations 200 --out msg.txt --json msg_plan.json >msg.out ||
    fail "plan with $name: exit $?"
  grep -q "^exact:  not run: the workload's $name is" msg.out ||
    fail "plan with $name: no word of the exact search: $(grep '^exact' msg.out)"
  [ "$(field msg_plan.json "'$name' in j['plan']['exact_skipped']")" = True ] ||
    fail "plan --json with $name: no exact_skipped"
  "$rrfp" simulate "${shape[@]}" --hint msg.txt --policy fixed --json msg_sim.json >/dev/null
  planned=$(field msg_plan.json "j['plan']['makespan_ms']")
  simulated=$(field msg_sim.json "j['runs'][0]['makespan_ms']")
  [ "$planned" = "$simulated" ] || fail "plan with $name made $planned ms, its hint simulates to $simulated ms"
  set +e
  "$rrfp" plan "${shape[@]}" --max-evaluations 20 --exact on >msg.out 2>msg.err
  rc=$?
  set -e
  [ "$rc" = 2 ] && grep -q "^rrfp: error: --exact on: the workload's $name is" msg.err ||
    fail "plan --exact on with $name: exit $rc, $(cat msg.err)"
done
echo "ok: plan leaves links, serial receives, slowdowns and wake-ups to the search, and it reproduces"

# A step of zero-duration tasks (simulate takes it, in 0 ms) is planned too: a makespan of 0
# stood for "infeasible" and plan said "no feasible starting order".
echo '{"forward_us": 0}' >zero.json
"$rrfp" plan --pp 2 -m 4 --workload uniform --workload-file zero.json --max-evaluations 20 \
  --json zero_plan.json >zero.out || fail "plan of zero durations: exit $?"
grep -q "^best:   0.000 ms, optimal (it meets the lower bound); lower bound 0.000 ms (gap 0.0%)" zero.out || fail "zero: $(grep '^best' zero.out)"
[ "$(field zero_plan.json "[s['makespan_ms'] for s in j['plan']['starts'] if s['name'] == 'ready bf']")" = "[0.0]" ] ||
  fail "plan of zero durations: ready bf said infeasible"
echo "ok: a step of zero-duration tasks is planned (0 ms)"

# A hint that runs the backward whole (1f1b) on that trace: each W adds to its B, the work
# the trace recorded (its task time) unchanged.
"$rrfp" simulate --pp 4 -m 8 --replay t.json --hint 1f1b --policy fixed --json f.json >/dev/null
[ "$(field f.json "j['runs'][0]['split_backward']")" = False ] || fail "1f1b on a W trace split"
"$rrfp" simulate --pp 4 -m 8 --replay t.json --hint 1f1b --policy fixed --split-backward on \
  --json n.json >/dev/null
work() { field "$1" "round(sum(s['busy_ms'] for s in j['runs'][0]['stages']), 3)"; }
[ "$(work f.json)" = "$(work n.json)" ] || fail "folded W: $(work f.json) ms of work, split $(work n.json)"
echo "ok: a W trace under 1f1b folds each W into its B ($(work f.json) ms of work both ways)"

# A CSV with W tasks: bf under auto runs the backward whole, bfw splits it.
{
  echo "stage,chunk,microbatch,kind,duration_us"
  for mb in 0 1; do
    for s in 0 1; do
      echo "$s,$s,$mb,F,10"
      echo "$s,$s,$mb,B,12"
      echo "$s,$s,$mb,W,8"
    done
  done
} >w.csv
"$rrfp" simulate --pp 2 -m 2 --replay w.csv --hint bf --policy ready --json a.json >/dev/null
[ "$(field a.json "j['runs'][0]['split_backward']")" = False ] || fail "a CSV with W: bf"
"$rrfp" simulate --pp 2 -m 2 --replay w.csv --hint bfw --policy ready --json o.json >/dev/null
[ "$(field o.json "j['runs'][0]['split_backward']")" = True ] || fail "a CSV with W: bfw"
[ "$(work a.json)" = "$(work o.json)" ] || fail "CSV: $(work a.json) ms of work, split $(work o.json)"
echo "ok: a CSV with W tasks: bf folds, bfw splits, the same work"

# A CSV of several steps, without W tasks, replayed by default: its last step, named in the
# header (it named none). Under the default auto it cannot split, and says to replay with
# --split-backward off; that flag then leaves BFW out of the default comparison (it was
# refused as "--hint bfw: needs --split-backward on", a flag not given).
{
  echo "step,stage,chunk,microbatch,kind,duration_us"
  for step in 4 5; do
    for mb in 0 1; do
      for s in 0 1; do
        echo "$step,$s,$s,$mb,F,$((10 + step))"
        echo "$step,$s,$s,$mb,B,20"
      done
    done
  done
} >steps.csv
"$rrfp" simulate --pp 2 -m 2 --replay steps.csv >so.log 2>&1 &&
  fail "a CSV without W tasks replayed split by default"
grep -q "replay it with --split-backward off" so.log || fail "no advice: $(tail -1 so.log)"
"$rrfp" simulate --pp 2 -m 2 --replay steps.csv --split-backward off --json so.json >so.log 2>&1 ||
  fail "the advice fails: $(tail -1 so.log)"
[ "$(field so.json "[(r['hint'], r['policy']) for r in j['runs']]")" = \
  "[('1f1b', 'fixed'), ('1f1b', 'fixed'), ('bf', 'ready')]" ] ||
  fail "the default comparison without the split: $(field so.json "[r['hint'] for r in j['runs']]")"
[ "$(field so.json "j['workload']")" = "replay:steps.csv step 5" ] ||
  fail "a CSV of several steps: $(field so.json "j['workload']")"
# Jitter on top of a replay is named with it (its makespans are not the measured ones); a preset
# whose times the replay replaces is refused (it was taken and changed nothing).
"$rrfp" simulate --pp 2 -m 2 --replay steps.csv --split-backward off --workload jitter:J3 \
  --json sj.json >/dev/null || fail "a replay with jitter failed"
[ "$(field sj.json "j['workload']")" = "replay:steps.csv step 5 + jitter:J3" ] ||
  fail "a replay with jitter: $(field sj.json "j['workload']")"
rc=0
"$rrfp" simulate --pp 2 -m 2 --replay steps.csv --split-backward off --workload multimodal \
  >so.log 2>&1 || rc=$?
[ "$rc" -eq 2 ] && [ "$(wc -l <so.log)" -eq 1 ] &&
  grep -q "^rrfp: error: --workload: with --replay (and --tp 1) only a jitter preset" so.log ||
  fail "a preset a replay ignores: $(cat so.log)"
# A profiler trace without W tasks says the same (it named the missing W tasks only).
"$rrfp" simulate --pp 2 -m 4 --replay "$data/torch-pp2" >so.log 2>&1 &&
  fail "a trace without W tasks replayed split by default"
grep -q "the trace has no W tasks.*replay it with --split-backward off" so.log ||
  fail "no advice for a trace: $(tail -1 so.log)"
# With --step too (that path returned before the advice).
"$rrfp" simulate --pp 2 -m 4 --replay "$data/torch-pp2" --step 1 >so.log 2>&1 &&
  fail "a trace's step without W tasks replayed split by default"
grep -q "the trace has no W tasks.*replay it with --split-backward off" so.log ||
  fail "no advice for a trace's step: $(tail -1 so.log)"
echo "ok: a CSV of several steps without W: its last step, and --split-backward off compares"

# The default comparison under one --comm: the baseline once (its blocking and async rows were
# both that mode, one speedup against a row that duplicated it), then ready BF and BFW.
for mode in async blocking; do
  "$rrfp" simulate --pp 4 -m 8 --comm "$mode" --json d.json >/dev/null
  [ "$(field d.json "[(r['hint'], r['policy'], r['comm']) for r in j['runs']]")" = \
    "[('1f1b', 'fixed', '$mode'), ('bf', 'ready', '$mode'), ('bfw', 'ready', '$mode')]" ] ||
    fail "simulate --comm $mode: $(field d.json "[r['hint'] for r in j['runs']]")"
done
# The fixed policy enforces no back-pressure limit: its rows carry none (a number read as one).
[ "$(field d.json "[r['limit'] for r in j['runs']]")" = "[None, 4, 4]" ] ||
  fail "limits of the default comparison: $(field d.json "[r['limit'] for r in j['runs']]")"
echo "ok: the default comparison under one --comm: three runs"

# A trace of several measured runs replayed without --step: every row replays one step, the
# first complete under the splitting row's shape (run 3, ready BFW, the first with W tasks).
# Rows took the first complete under their own shape: three replayed run 0, BFW run 3.
"$rrfp" run --pp 2 -m 4 --workload language --trace multi.json >/dev/null
"$rrfp" simulate --pp 2 -m 4 --replay multi.json --json r.json >/dev/null
[ "$(field r.json "j['workload']")" = "replay:multi.json step 3" ] ||
  fail "replay of several runs: $(field r.json "j['workload']")"
"$rrfp" simulate --pp 2 -m 4 --replay multi.json --step 3 --hint 1f1b --policy fixed \
  --json r3.json >/dev/null
[ "$(field r.json "j['runs'][1]['makespan_ms']")" = "$(field r3.json "j['runs'][0]['makespan_ms']")" ] ||
  fail "replay of several runs: fixed 1F1B's row is not step 3's replay"
"$rrfp" simulate --pp 2 -m 4 --replay multi.json --hint bf --json r1.json >/dev/null
[ "$(field r1.json "j['workload']")" = "replay:multi.json step 0" ] ||
  fail "replay of several runs, no split: $(field r1.json "j['workload']")"
echo "ok: a trace of several runs replays one step for every row"

# predict reads an rrfp trace's TP size from its threads (it needed --tp: "tp rank 1 >= --tp 1").
"$rrfp" simulate --pp 2 -m 4 --tp 2 --hint 1f1b --policy fixed --trace tp2.json >/dev/null
"$rrfp" predict tp2.json --json ptp.json >ptp.log 2>&1 || fail "predict of a TP=2 trace: $(tail -1 ptp.log)"
grep -q "TP=2" ptp.log || fail "predict of a TP=2 trace: $(head -1 ptp.log)"
echo "ok: predict takes an rrfp trace's TP size"

# ...and where its chunks ran: a V-shape trace predicts as one (it was refused by stage).
"$rrfp" simulate --pp 2 --vpp 2 --placement vshape -m 4 --hint bf --policy ready --trace vs.json >/dev/null
"$rrfp" predict vs.json >pvs.log 2>&1 || fail "predict of a V-shape trace: $(tail -1 pvs.log)"
grep -q "V=2 (vshape)" pvs.log || fail "predict of a V-shape trace: $(head -1 pvs.log)"
"$rrfp" simulate --pp 2 --vpp 3 -m 4 --hint bf --policy ready --trace v3.json >/dev/null
"$rrfp" predict v3.json >pv3.log 2>&1 || fail "predict of a V=3 trace: $(tail -1 pv3.log)"
grep -q "V=3 (loop)" pv3.log || fail "predict of a V=3 trace: $(head -1 pv3.log)"
echo "ok: predict takes a V-shape trace's placement (and V=3 stays loop)"

# predict on that trace: the step replayed decides the split backward, not the file (W tasks
# in run 3 made every step split, and steps 0-2 were refused for lacking W tasks).
for s in 0 1; do
  "$rrfp" predict multi.json --step "$s" --json p$s.json >/dev/null ||
    fail "predict --step $s of a trace whose W tasks are in another step"
  [ "$(field p$s.json "j['split_backward']")" = False ] || fail "predict --step $s split"
done
"$rrfp" predict multi.json --step 3 --json p3.json >/dev/null
[ "$(field p3.json "j['split_backward']")" = True ] || fail "predict --step 3 did not split"
echo "ok: predict splits as the step it replays"

# predict --svg draws the measured step, the twin and the best prediction; where no rule beats
# the recorded order at its memory, the twin alone (it was drawn twice, under one label).
labels() { grep -o 'font-size="12">[^<:]*' "$1" | sed 's/.*>//' | tr '\n' ';'; }
"$rrfp" simulate --pp 4 -m 16 --hint 1f1b --policy fixed --workload jitter:J3 --seed 1 \
  --trace j3.json >/dev/null
"$rrfp" predict j3.json --svg three.svg | grep -q "^timeline (measured, twin, best): " ||
  fail "predict --svg of a step a rule beats: no line"
[ "$(labels three.svg)" = "measured (rrfp);recorded order (twin);ready bf @4;" ] ||
  fail "predict --svg of a step a rule beats: $(labels three.svg)"
"$rrfp" predict "$data/torch-pp2" --svg two.svg |
  grep -q "^timeline (measured, twin; no rule beats the recorded order at its memory): " ||
  fail "predict --svg of a step no rule beats: no line"
[ "$(labels two.svg)" = "measured (torch);recorded order (twin);" ] ||
  fail "predict --svg of a step no rule beats: $(labels two.svg)"
echo "ok: predict --svg draws the best prediction, or none where the twin is the best"

# A measured step begins with the compute threads' start, before its first task: `run` counts
# it, predict's measured step (first start to last end) does not, and the two read up to 21%
# apart on a busy machine without a word. The trace carries the run's own step; predict shows
# it beside its own, and run --compare says the start-up.
[ "$(field p3.json "j['run_step_ms'] > j['measured_ms']")" = True ] ||
  fail "predict of a run: run_step_ms $(field p3.json "j['run_step_ms'], j['measured_ms']")"
"$rrfp" predict multi.json --step 3 | grep -q "^the run's own step .* ms of start-up before" ||
  fail "predict of a run: no line for the run's own step"
"$rrfp" simulate --pp 2 -m 4 --hint bf --policy ready --trace sim1.json >/dev/null
"$rrfp" predict sim1.json --json ps.json >ps.txt
[ "$(field ps.json "j['run_step_ms'] == j['measured_ms']")" = True ] ||
  fail "predict of a simulation: $(field ps.json "j['run_step_ms'], j['measured_ms']")"
grep -q "own step" ps.txt && fail "predict of a simulation: a start-up line"
"$rrfp" run --pp 2 -m 4 --workload uniform --compare --json cmp.json | grep -q "^start-up (a measured step's start to its first task or wait" ||
  fail "run --compare: no start-up line"
[ "$(field cmp.json "all(0 < r['start_up_ms'] < r['measured_ms'] for r in j['compare']['runs'])")" = True ] ||
  fail "run --compare: start_up_ms $(field cmp.json "j['compare']")"
echo "ok: the run's own step and its start-up, beside predict's and the models'"

# The measurement scripts read that table with scripts/fidelity.awk: one CSV row a run, every
# field after the name a number (the start-up line after it was read as a row of its own, and
# --repeat's range column shifted every field counted from the end).
for repeat in 1 2; do
  "$rrfp" run --pp 2 -m 4 --workload uniform --compare --repeat $repeat --json fa.json |
    awk -v w=uniform -v s=1 -f "$scripts/fidelity.awk" >fa.csv
  "$py" - fa.csv "$(field fa.json "len(j['compare']['runs'])")" <<'EOF' || fail "fidelity.awk, --repeat $repeat: $(cat fa.csv)"
import sys
rows = [l.rstrip("\n").split(",") for l in open(sys.argv[1])]
assert len(rows) == int(sys.argv[2]), len(rows)
for r in rows:
    assert len(r) == 11 and r[:2] == ["uniform", "1"], r
    [float(x) for x in r[3:] if x != ""]
EOF
done
echo "ok: scripts/fidelity.awk reads run --compare's table, with and without --repeat"

# predict --comm blocking: the twin replays a blocking step with a rendezvous per message and
# reproduces a simulated one exactly (async it came out 16% short); a ready run's blocking
# order, which no fixed order's receives can follow, replays exactly under the ready policy
# ranked by it (refused as a deadlock before).
"$rrfp" simulate --pp 2 --vpp 2 -m 4 --hint interleaved-1f1b --policy fixed --comm blocking \
  --trace blk.json >/dev/null
"$rrfp" predict blk.json --comm blocking --json pb.json >/dev/null
[ "$(field pb.json "abs(j['reproduction_error']) < 1e-9")" = True ] ||
  fail "predict --comm blocking: twin error $(field pb.json "j['reproduction_error']")"
"$rrfp" simulate --pp 2 --vpp 2 -m 4 --hint bf --policy ready --comm blocking --trace rb.json \
  >/dev/null
"$rrfp" predict rb.json --comm blocking --json prb.json >/dev/null 2>err.txt ||
  fail "predict --comm blocking of a ready run: $(cat err.txt)"
[ "$(field prb.json "abs(j['reproduction_error']) < 1e-9")" = True ] ||
  fail "predict --comm blocking of a ready run: twin error $(field prb.json "j['reproduction_error']")"
# Without --comm, rrfp's trace of a fixed blocking run says so: replayed blocking (async it came
# out 10-16% short); so is a ready run's, under the ready policy (replayed async as a fixed
# order deadlocked, it came out short).
"$rrfp" predict blk.json --json pa.json >/dev/null
[ "$(field pa.json "j['recorded_comm']")" = blocking ] &&
  [ "$(field pa.json "abs(j['reproduction_error']) < 1e-9")" = True ] ||
  fail "predict of a fixed blocking run's trace: $(field pa.json "j['recorded_comm'], j['reproduction_error']")"
"$rrfp" predict rb.json --json pr.json >/dev/null || fail "predict of a ready blocking run's trace"
[ "$(field pr.json "j['recorded_comm']")" = blocking ] &&
  [ "$(field pr.json "abs(j['reproduction_error']) < 1e-9")" = True ] ||
  fail "predict of a ready blocking run's trace: $(field pr.json "j['recorded_comm'], j['reproduction_error']")"
# So too where the run's label is long (a hint file's long path): the label a trace shows is cut
# to 60 characters, which cut off its " (blocking)", and the step was replayed async (-9.3%).
long=hint-file-with-a-name-long-enough-to-push-the-label-past-sixty-characters.txt
"$rrfp" schedule show --pp 2 --vpp 2 -m 4 --hint interleaved-1f1b --out "$long" >/dev/null
"$rrfp" simulate --pp 2 --vpp 2 -m 4 --hint "$long" --policy fixed --comm blocking \
  --trace blkl.json >/dev/null
"$rrfp" predict blkl.json --json pl.json >/dev/null
[ "$(field pl.json "j['recorded_comm']")" = blocking ] &&
  [ "$(field pl.json "abs(j['reproduction_error']) < 1e-9")" = True ] ||
  fail "predict of a fixed blocking run with a long label: $(field pl.json "j['recorded_comm'], j['reproduction_error']")"
echo "ok: predict --comm blocking replays a fixed blocking step exactly, and auto takes it from the trace"

# A step recorded with ordered forwards (batch norm) is predicted and replayed with them, as
# rrfp's trace records: predict showed adaptive 1.052x at the recorded memory where rrfp, held
# to the ordering, runs it as BFW, and simulate --replay dropped the ordering too.
"$rrfp" simulate --pp 4 -m 8 --workload multimodal --seed 3 --ordered-forwards on --hint bfw \
  --policy ready --trace of.json >/dev/null
"$rrfp" predict of.json --hints adaptive --limit 0 --json po.json >po.log ||
  fail "predict of a step with ordered forwards"
grep -q "split backward, ordered forwards (as the trace's run had them)" po.log ||
  fail "predict's header on ordered forwards: $(head -1 po.log)"
[ "$(field po.json "(j['ordered_forwards'], j['ordered_forwards_from'], j['predictions'][0]['speedup_vs_recorded'])")" = "(True, 'trace', 1.0)" ] ||
  fail "predict of a step with ordered forwards: $(field po.json "(j['ordered_forwards_from'], j['predictions'][0]['speedup_vs_recorded'])")"
# Each row's peak D per stage, as the table shows it (the JSON had the limit alone): at the
# memory-neutral limit, none above it.
[ "$(field po.json "(len(j['replayed_peak_d']), max(j['replayed_peak_d']) == j['memory_neutral_limit'], all(len(p['peak_d']) == 4 and max(p['peak_d']) <= p['limit'] for p in j['predictions']))")" = "(4, True, True)" ] ||
  fail "predict's peak D in JSON: $(field po.json "(j['replayed_peak_d'], [p['peak_d'] for p in j['predictions']])")"
"$rrfp" predict of.json --hints adaptive --limit 0 --ordered-forwards off --json pu.json >/dev/null
[ "$(field pu.json "(j['ordered_forwards'], j['predictions'][0]['speedup_vs_recorded'] > 1.04)")" = "(False, True)" ] ||
  fail "predict --ordered-forwards off: $(field pu.json "j['predictions'][0]['speedup_vs_recorded']")"
"$rrfp" simulate --pp 4 -m 8 --replay of.json --hint adaptive --policy ready --limit 4 \
  --json so.json >so.log
grep -q "M=8 (ordered forwards)" so.log || fail "simulate --replay of ordered forwards: $(head -1 so.log)"
"$rrfp" simulate --pp 4 -m 8 --replay of.json --hint adaptive --policy ready --limit 4 \
  --ordered-forwards off --json su.json >/dev/null
[ "$(field so.json "j['runs'][0].get('ordered_forwards', False)")" = True ] &&
  [ "$(field su.json "j['runs'][0].get('ordered_forwards', False)")" = False ] ||
  fail "simulate --replay did not take the trace's ordered forwards, or --ordered-forwards off"
echo "ok: a step recorded with ordered forwards is predicted and replayed with them"

# rrfp run's lower bound is of the compute its tasks measured: tasks drawn at 20 us sleep longer,
# and a bound of the drawn durations (0.44 ms) sat below one stage's own measured work (0.83 ms).
echo '{"preset": "uniform", "forward_us": 20}' >tiny.json
"$rrfp" run --pp 2 -m 4 --workload-file tiny.json --hint bf --json run.json >/dev/null 2>&1 ||
  fail "rrfp run of 20 us tasks"
[ "$(field run.json "all(r['lower_bound_ms'] >= max(s['busy_ms'] for s in r['stages']) - 1e-6 for r in j['runs'])")" = True ] ||
  fail "rrfp run: a bound below a stage's measured work: $(field run.json "[(r['lower_bound_ms'], max(s['busy_ms'] for s in r['stages'])) for r in j['runs']]")"
echo "ok: rrfp run's lower bound holds each stage's measured work"

# `run --tp-protocol none` runs its steps: each rank picks alone, and where the ranks' picks
# diverge the runtime's collective says so, naming both ranks ("all-reduce of ..."). The run's
# wall-time estimate simulated it first, and the simulator's divergence ("entered the collective
# of F c2 m4 while rank(s) of its group ...") ended it before any step ran.
set +e
"$rrfp" run --tp 2 --tp-protocol none --hint bfw --policy ready --pp 4 -m 16 --seed 1 >n.txt 2>&1
rc=$?
set -e
grep -q "entered the collective of" n.txt && fail "run --tp-protocol none: the simulator's divergence: $(tail -1 n.txt)"
[ "$rc" -eq 0 ] || grep -q "entered the all-reduce of .* while rank .* collective order diverged" n.txt ||
  fail "run --tp-protocol none: exit $rc, $(tail -1 n.txt)"
echo "ok: run --tp-protocol none runs, its divergence (if any) told by the runtime's collective"

# A fixed TP order's trace shows no coordination (its ranks each follow the list): predict's
# rules take the default, or what --tp-protocol and --coord-us give, and say which. They ran
# with none: 1.146x predicted where the ready run gives 1.111x.
printf '{"preset": "language", "coord_latency_us": 100}' >c100.json
"$rrfp" simulate --pp 4 -m 8 --tp 2 --workload-file c100.json --hint 1f1b --policy fixed \
  --tp-protocol agree --trace tpfixed.json >/dev/null
"$rrfp" predict tpfixed.json --hints bf >tpd.txt
grep -q "^tp coordination      leader, 10 us (the simulator's default" tpd.txt ||
  fail "predict's coordination by default: $(grep coordination tpd.txt)"
"$rrfp" predict tpfixed.json --hints bf --tp-protocol agree --coord-us 100 --json tpg.json >tpg.txt
grep -q "^tp coordination      agree, 100 us (as given)" tpg.txt ||
  fail "predict's coordination as given: $(grep coordination tpg.txt)"
"$rrfp" simulate --pp 4 -m 8 --tp 2 --workload-file c100.json --hint bf --policy ready \
  --tp-protocol agree --limit 32 --json r32.json >/dev/null
ready32=$(field r32.json "j['runs'][0]['makespan_ms']")
[ "$(field tpg.json "[p['makespan_ms'] for p in j['predictions'] if p['limit'] == 32][0]")" = "$ready32" ] &&
  [ "$(field tpg.json "j['tp_coordination']")" = "{'from': 'option', 'latency_us': 100.0, 'protocol': 'agree'}" ] ||
  fail "predict's rules as given: $(field tpg.json "j['predictions']") against $ready32"
echo "ok: predict's rules of a fixed TP trace coordinate, as given or by default"
# A table of fixed runs alone at TP 2 named the protocol none of them ran.
"$rrfp" simulate --pp 2 -m 4 --tp 2 --hint 1f1b --policy fixed --tp-protocol agree | head -1 |
  grep -q " TP=2 (fixed lists: no coordination)  workload=" || fail "a fixed table's TP header"
"$rrfp" simulate --pp 2 -m 4 --tp 2 --tp-protocol agree | head -1 | grep -q " TP=2 (agree)  workload=" ||
  fail "a table with ready runs names their protocol"
