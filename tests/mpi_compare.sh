#!/usr/bin/env bash
# rrfp run --transport mpi --compare under mpirun: each run reports the median of its timed
# steps with their range; --calibration baseline fits the bandwidth to the first run, so its row
# reproduces the measured step (error +0.0%), while the others stay predictions; by default the
# transport is calibrated before each round and the medians simulated, a blocking run's payload
# on its offer as the runtime sends it; a blocking run with --rendezvous pull completes and is
# simulated with its bytes after the acceptance.
# Usage: mpi_compare.sh PATH/TO/rrfp
set -u
rrfp=$1
here=$(cd "$(dirname "$0")" && pwd)
load="$here/../scripts/workloads/j2-1mib-messages.json"
out=$(mktemp)
cal=$(mktemp --suffix=.json)
js=$(mktemp --suffix=.json)
work=$(mktemp -d)
trap 'rm -rf "$out" "$cal" "$js" "$work"' EXIT
fail() { echo "FAIL: $*"; cat "$out"; exit 1; }
timeout -k 10 120 "$here/mpirun.sh" 2 "$rrfp" run --transport mpi --compare --calibration baseline \
  --workload-file "$load" --pp 2 -m 4 --hint 1f1b --policy fixed --repeat 3 --json "$js" >"$out" 2>&1 ||
  fail "the run exited $?"
# On a loaded machine the calibration's latency alone may make the step longer than it measured:
# then no bandwidth fits, and the run says so (it said "fitted" with the row 2.8% off).
if grep -q "^not fitted to fixed 1f1b (async)'s measured step: at 1000 GB/s, the bound, its simulated step is still +[0-9.]*% off (the calibration's latency [0-9.]* us explains more than the step took)" "$out"; then
  echo "mpi compare: the calibration's latency exceeds the step here (a loaded machine?): no fit"
else
  # --json: the fitted model and the fitted run's error, within what the run calls fitted (0.1%:
  # at the bandwidth's bound on a loaded machine a fit may land 0.04% off, and says "fitted").
  /usr/bin/python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))["compare"]
assert " GB/s" in c["message_model"] and len(c["runs"][0]["measured_steps_ms"]) == 3, c
assert abs(c["runs"][0]["error"]) < 1e-3, c' "$js" || fail "the JSON lacks the comparison"
  grep -q "^fitted to fixed 1f1b (async)'s measured step" "$out" || fail "no line naming the fit"
  # The fidelity table's first row: measured = simulated, error +0.0%, a replay with the run's own
  # task durations beside it, and a range of 3 steps.
  # found: without the header there is no row to check, and awk would exit 0 at the end.
  awk '/measured_range_ms/ { found = 1; getline
         ok = $(NF - 6) ~ /^[+-]0\.0%$/ && $(NF - 5) ~ /^[0-9]+\.[0-9][0-9]$/ &&
              $(NF - 4) ~ /^[+-][0-9.]+%$/ && $NF ~ /^[0-9.]+-[0-9.]+$/
         exit }
       END { exit !(found && ok) }' \
    "$out" || fail "no fidelity table, or the fitted row does not reproduce its step"
fi
# The default model: a calibration before each round (two tables, two fits), simulated with
# each field's median, of two their mean: the bandwidth printed is the mean of the two fits'.
timeout -k 10 120 "$here/mpirun.sh" 2 "$rrfp" run --transport mpi --compare --rounds 2 \
  --workload-file "$load" --pp 2 -m 4 --hint 1f1b --policy fixed >"$out" 2>&1 ||
  fail "the two-round run exited $?"
[ "$(grep -c '^fit' "$out")" = 2 ] || fail "not one calibration per round"
awk '/^fit/ { split($0, a, "bytes / "); split(a[2], b, " "); sum += b[1]; n++ }
     /^simulating .*before each of the 2 rounds/ {
       split($0, a, "bytes / "); split(a[2], b, " "); got = b[1]; seen = 1 }
     END { exit !(seen && n == 2 && (got - sum / 2) ^ 2 < 0.011 ^ 2) }' "$out" ||
  fail "the simulated bandwidth is not the mean of the two rounds' fits"
grep -q "^simulating .*, a blocking run's payload with its offer$" "$out" ||
  fail "the default rendezvous is not simulated with its payload on the offer"
# --rendezvous pull: the blocking run's payloads wait for the receiver's pull (runtime/delivery.cpp);
# the step completes and is reported, and is simulated with its bytes after the acceptance
# whatever the calibration file says. Its idle ranks spin and poll the transport themselves
# (--idle-spin-us), taking the offers, pulls and payloads on their own threads.
echo '{"comm_latency_us": 30, "comm_bandwidth_gbps": 5, "comm_offer_payload": true}' >"$cal"
timeout -k 10 120 "$here/mpirun.sh" 2 "$rrfp" run --transport mpi --rendezvous pull --compare \
  --calibration "$cal" --workload-file "$load" --pp 2 -m 4 --hint 1f1b --policy fixed \
  --comm blocking --idle-spin-us 200 >"$out" 2>&1 || fail "the pulling run exited $?"
grep -qE "^fixed 1f1b \(blocking\) +[0-9.]+ " "$out" || fail "no row for the pulling run"
grep -q "^simulating .*: 30.0 us + bytes / 5.00 GB/s$" "$out" ||
  fail "the pulling run is not simulated with the file's model and its bytes after the acceptance"
# refused JSON ERROR WHAT: a run given the calibration file JSON exits 2 with ERROR.
refused() {
  echo "$1" >"$cal"
  timeout -k 10 60 "$here/mpirun.sh" 2 "$rrfp" run --transport mpi --compare --calibration "$cal" \
    --workload-file "$load" --pp 2 -m 4 --hint 1f1b --policy fixed >"$out" 2>&1
  local rc=$?
  [ "$rc" -eq 2 ] && grep -qF "rrfp: error: --calibration: '$cal' $2" "$out" || fail "$3: exit $rc"
}
# A calibration measured on another transport is refused before the run, naming both: one of
# inproc (which moves pointers) was taken as the model of mpi's messages.
refused '{"comm_latency_us": 30, "calibration": {"transport": "inproc"}}' \
  'was measured on the "inproc" transport, this run'"'"'s is mpi' "a calibration of inproc"
# One without a bandwidth (its sizes could not tell one from noise) too: over the preset's 0,
# every message's size was simulated as free.
refused '{"comm_latency_us": 30, "calibration": {"transport": "mpi"}}' \
  "gives no comm_bandwidth_gbps" "a calibration without a bandwidth"
# A bandwidth of 0 (every size free) where the calibration did not find size free, a workload
# field beside the messages, and a bandwidth no message can be timed by: each was taken (the
# 0 passed the check above, the field was dropped without a word, and the bandwidth was
# refused once every run had been emulated, naming no file).
refused '{"comm_latency_us": 30, "comm_bandwidth_gbps": 0, "calibration": {"transport": "mpi"}}' \
  "gives comm_bandwidth_gbps 0, which models every message's size as free" "a bandwidth of 0"
# A file of calibrate lacking a field it writes took the preset's value (no latency, no links,
# no serial receive) without a word; a record that is no object skipped the transport's check;
# an array was told it gave no bandwidth.
refused '{"comm_bandwidth_gbps": 5, "comm_links": 2, "comm_two_slowdown": 1, "comm_serial_receive": true, "calibration": {"transport": "mpi"}}' \
  "gives no comm_latency_us, which rrfp calibrate writes beside a bandwidth" "a calibration edited"
refused '{"comm_latency_us": 30, "comm_bandwidth_gbps": 5, "calibration": "inproc"}' \
  "gives calibration \"inproc\", not an object (the record rrfp calibrate writes)" \
  "a record that is no object"
refused '[]' "is an array of 0, not a JSON object" "an array"
refused '{"comm_latency_us": 30, "comm_bandwidth_gbps": 5, "forward_us": 9, "preset": "jitter"}' \
  "sets forward_us, preset, which a message model does not take" "a workload field"
refused '{"comm_latency_us": 30, "comm_bandwidth_gbps": 1e-300}' \
  "cannot model the run's messages: " "a bandwidth of 1e-300 GB/s"
# The transport moves the bytes in its own time: the model's 50 ms latencies are not spent, and
# the bound counts no message (it counted them: with 5 ms, a bound of 13.3 ms beside a step of
# 4.2 ms, efficiency 3.18).
echo '{"preset": "uniform", "forward_us": 300, "comm_latency_us": 50000, "bytes_per_token": 64}' \
  >"$cal"
timeout -k 10 60 "$here/mpirun.sh" 2 "$rrfp" run --transport mpi --workload-file "$cal" \
  --pp 2 -m 4 --hint 1f1b --policy fixed --json "$js" >"$out" 2>&1 || fail "50 ms latencies: exit $?"
# ... and that is said (it was not), once.
[ "$(grep -c "^rrfp run: warning: --workload-file: '$cal' sets comm_latency_us, which --transport mpi does not emulate" "$out")" -eq 1 ] ||
  fail "a workload file's message model over mpi: not said once"
# Its coordination latency likewise (the groups' choices cross the transport), while --compare
# simulates the file's value: 20 ms simulated steps twice as long as the run's, unsaid.
echo '{"coord_latency_us": 20000}' >"$cal"
timeout -k 10 60 "$here/mpirun.sh" 4 "$rrfp" run --transport mpi --workload-file "$cal" \
  --pp 2 --tp 2 -m 2 --workload uniform --hint 1f1b --policy fixed >"$out" 2>&1 ||
  fail "coord_latency_us over mpi: exit $?"
[ "$(grep -c "^rrfp run: warning: --workload-file: '$cal' sets coord_latency_us, which --transport mpi does not emulate: the TP groups' choices cross the transport" "$out")" -eq 1 ] ||
  fail "a workload file's coordination latency over mpi: not said once: $(grep warning "$out")"
/usr/bin/python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))["runs"][0]
assert 0 < r["efficiency"] <= 1 and r["lower_bound_ms"] < 50, r' "$js" ||
  fail "a bound over a transport counts the model's message latencies"
# One process (P = 1) sends no message: --compare simulates its runs without a calibration,
# which needs two processes (it was refused, naming no flag).
timeout -k 10 60 "$here/mpirun.sh" 1 "$rrfp" run --transport mpi --compare --workload-file "$cal" \
  --pp 1 -m 2 --hint 1f1b --policy fixed >"$out" 2>&1 || fail "--compare at P=1: exit $?"
grep -q "^simulator fidelity" "$out" || fail "--compare at P=1: no fidelity table"
# calibrate over mpirun: the --seconds floor is the job's own (4 processes took 19.3 s of
# --seconds 3: it was computed for 2), and --out is checked by rank 0 alone, which writes it (a
# folder only rank 0's node has was refused by the others).
timeout -k 10 60 "$here/mpirun.sh" 4 "$rrfp" calibrate --transport mpi --streams --sizes 32M \
  --seconds 4 >"$out" 2>&1
rc=$?
[ "$rc" -eq 2 ] && [ "$(grep -c "^rrfp: error" "$out")" -eq 1 ] &&
  grep -q "^rrfp: error: --seconds: 4 s cannot hold a calibration of these --sizes between 4 endpoints" "$out" ||
  { cat "$out"; fail "calibrate over 4 processes under a budget for 2: exit $rc"; }
# The processes are its endpoints: a third measured nothing, a fifth and on sat idle; said
# before a budget too short (which advised a --seconds, then refused the job's size).
timeout -k 10 60 "$here/mpirun.sh" 3 "$rrfp" calibrate --transport mpi --sizes 8,256M \
  --seconds 0.1 >"$out" 2>&1
rc=$?
[ "$rc" -eq 2 ] && grep -q "start it with mpirun -np 2 or 4 (got -np 3)" "$out" ||
  { cat "$out"; fail "calibrate over 3 processes: exit $rc"; }
mkdir -p "$work/n0/sub" "$work/n1"
timeout -k 10 60 "$here/mpirun.sh" 1 -wdir "$work/n0" "$rrfp" calibrate --transport mpi \
  --sizes 8 --seconds 1 --out sub/c.json : -np 1 -wdir "$work/n1" "$rrfp" calibrate \
  --transport mpi --sizes 8 --seconds 1 --out sub/c.json >"$out" 2>&1 &&
  [ -s "$work/n0/sub/c.json" ] || { cat "$out"; fail "calibrate --out in rank 0's folder only"; }
# Each round's calibration counts against the limit on a run's time: 100 rounds of a step of
# milliseconds ran some 6 minutes unsaid, and steps of 120 s in all with 500 s of calibrations
# beside them were let start. Refused at once now.
echo '{"preset":"uniform","forward_us":100000}' >"$work/w.json"
timeout -k 10 60 "$here/mpirun.sh" 2 "$rrfp" run --transport mpi --pp 2 -m 2 --workload-file \
  "$work/w.json" --hint 1f1b --policy fixed --compare --rounds 100 --repeat 1 >"$out" 2>&1
rc=$?
[ "$rc" -eq 2 ] && grep -q "^rrfp: error: run: about 620 s of emulated steps and calibrations (.*up to 5 s calibrating the transport before each round; up to [0-9]* s with --warmup-extra.s 400 more; the transfers between the processes come on top); at most 600 s" "$out" ||
  fail "100 rounds of calibrations: exit $rc"
echo "mpi compare: the baseline fit reproduces its step; ranges printed; a calibration per" \
  "round, their mean simulated, payloads on the offers; a pulling run with spinning idle" \
  "ranks completes, simulated with its bytes after the acceptance; another transport's" \
  "calibration, and one without a bandwidth, are refused"
