#!/usr/bin/env bash
# rrfp train under signals and full disks: SIGTERM mid-run stops after the current step with
# exit 143, keeps every finished step's row in loss.csv and a checkpoint that resumes at the
# last row; SIGINT twice exits at once with 130; a disk that fills up ends the run with one line
# saying so, the previous checkpoint kept. Usage: train_signals.sh PATH/TO/rrfp
source "$(dirname "$0")/run_script.sh"
small=(--d-model 32 --layers 4 --eval-every 0)
unset OMP_NUM_THREADS  # one intra-op thread, as a resume below is told another count

# Waits (at most 60 s) until OUT/loss.csv holds at least N step rows.
wait_rows() {
  for _ in $(seq 1 600); do
    [ -f "$1/loss.csv" ] && [ "$(($(wc -l <"$1/loss.csv") - 1))" -ge "$2" ] && return 0
    sleep 0.1
  done
  return 1
}

"$rrfp" train "${small[@]}" --steps 2000 --save-every 7 --out "$tmp/a" >"$tmp/a.log" 2>&1 &
pid=$!
wait_rows "$tmp/a" 4 || fail "no loss rows after 60 s"
kill -TERM $pid
start=$SECONDS
wait $pid; rc=$?
[ "$rc" -eq 143 ] || fail "SIGTERM: exit $rc, want 143"
[ $((SECONDS - start)) -le 20 ] || fail "SIGTERM: took $((SECONDS - start)) s to stop"
rows=$(($(wc -l <"$tmp/a/loss.csv") - 1))
last=$(tail -n 1 "$tmp/a/loss.csv" | cut -d, -f1)
[ "$rows" = "$last" ] || fail "loss.csv has $rows rows but its last step is $last"
grep -q "stopped by SIGTERM after step $last of 2000 (checkpoint" "$tmp/a.log" ||
  { fail "no stop line naming step $last"; tail -3 "$tmp/a.log"; }
# The signal was acknowledged as it came, once (a step may be long, and nothing was said).
[ "$(grep -c "^rrfp train: SIGTERM taken: stopping after the current step; a second signal stops it at once$" "$tmp/a.log")" = 1 ] ||
  fail "no acknowledgement of SIGTERM, or more than one"
# That checkpoint, resumed with --steps at its step, is whole: refused, the log untouched (no
# validation was due at a mid-run step under --eval-every 0; it was taken, validated the step
# and said "a signal had cut short" a validation that never began).
cp "$tmp/a/loss.csv" "$tmp/a.csv"
"$rrfp" train "${small[@]}" --steps "$last" --resume "$tmp/a/checkpoint.bin" --out "$tmp/a" \
  >"$tmp/at.log" 2>&1
rc=$?
[ "$rc" -eq 2 ] && grep -q "already at step $last of --steps $last" "$tmp/at.log" &&
  cmp -s "$tmp/a/loss.csv" "$tmp/a.csv" ||
  fail "a mid-run checkpoint resumed at its step: exit $rc, $(tail -1 "$tmp/at.log")"
# So too under an --eval-every that falls on its step: whether a validation was due is the
# checkpoint's run's to say (this run's was taken: it "filled in" a validation never due, exit 0).
"$rrfp" train --d-model 32 --layers 4 --eval-every "$last" --steps "$last" \
  --resume "$tmp/a/checkpoint.bin" --out "$tmp/a" >"$tmp/at2.log" 2>&1
rc=$?
[ "$rc" -eq 2 ] && grep -q "already at step $last of --steps $last" "$tmp/at2.log" &&
  cmp -s "$tmp/a/loss.csv" "$tmp/a.csv" ||
  fail "a mid-run checkpoint resumed at its step, --eval-every $last: exit $rc, $(tail -1 "$tmp/at2.log")"
# The checkpoint is the last finished step's: a resume starts right after the last row.
# Under another intra-op thread count, which changes a step's last bits, other validation
# batches, which change the log's val_loss column (each said; neither was), and a hint file
# whose header sets 4 microbatches, not given (said, naming the file's header: it named
# --microbatches as if given).
"$rrfp" schedule show --hint 1f1b --pp 4 -m 4 --out "$tmp/m4.txt" >/dev/null || fail "schedule show"
OMP_NUM_THREADS=2 "$rrfp" train "${small[@]}" --steps $((last + 1)) --eval-batches 2 \
  --hint "$tmp/m4.txt" --resume "$tmp/a/checkpoint.bin" --out "$tmp/a" >"$tmp/r.log" 2>&1 ||
  fail "resume failed: $(tail -1 "$tmp/r.log")"
grep -q "warning: --microbatches is 4 (set by the hint file's header: --microbatches was not given); the checkpoint's run had 8: the run will not continue as that one would have" \
  "$tmp/r.log" || fail "no warning about the hint file's microbatches: $(head -4 "$tmp/r.log")"
grep -q "warning: the intra-op threads (OMP_NUM_THREADS) are 2; the checkpoint's run had 1" \
  "$tmp/r.log" || fail "no warning about the intra-op threads: $(head -3 "$tmp/r.log")"
# (Only the validation changes: it said the run would not continue as that one would have.)
grep -q "warning: --eval-batches is 2; the checkpoint's run had 8: the training goes on as that run's would have; only its validation differs" "$tmp/r.log" ||
  fail "no warning about --eval-batches: $(head -3 "$tmp/r.log")"
grep -q "resumed from $tmp/a/checkpoint.bin at step $last" "$tmp/r.log" || fail "resume did not start at step $last"
grep -q "^done: steps $((last + 1)) to $((last + 1)) of $((last + 1))," "$tmp/r.log" ||
  fail "the resumed run's closing line: $(grep '^done' "$tmp/r.log")"
# It was resumed with another --steps (and so another learning-rate schedule): said, by flag.
grep -q "rrfp train: warning: --steps is $((last + 1)); the checkpoint's run had 2000" "$tmp/r.log" ||
  fail "no warning about --steps: $(head -3 "$tmp/r.log")"
[ "$(tail -n 1 "$tmp/a/loss.csv" | cut -d, -f1)" = $((last + 1)) ] || fail "the resumed run did not append its row"
# Resumed into the folder of another run: its loss.csv is not this run's (its row for the
# checkpoint's step holds another loss, or there is none): refused, exit 2, the log untouched
# (another run's rows and this one's were spliced into one file).
"$rrfp" train "${small[@]}" --steps 2 --seed 2 --out "$tmp/other" >/dev/null 2>&1 || fail "the other run failed"
cp "$tmp/other/loss.csv" "$tmp/other.csv"
"$rrfp" train "${small[@]}" --steps $((last + 2)) --resume "$tmp/a/checkpoint.bin" \
  --out "$tmp/other" >"$tmp/o.log" 2>&1
rc=$?
[ "$rc" -eq 2 ] && grep -q "'$tmp/other/loss.csv' is another run's log" "$tmp/o.log" ||
  fail "a resume into another run's folder: exit $rc, $(tail -1 "$tmp/o.log")"
cmp -s "$tmp/other/loss.csv" "$tmp/other.csv" || fail "the other run's log changed"
# ...and a log of other columns (another build's, or an edited one): the rows were appended
# with more fields than its header names, exit 0.
cp -r "$tmp/a" "$tmp/cut"
cut -d, -f1-6 "$tmp/a/loss.csv" >"$tmp/cut/loss.csv"
"$rrfp" train "${small[@]}" --steps $((last + 2)) --resume "$tmp/cut/checkpoint.bin" \
  --out "$tmp/cut" >"$tmp/c.log" 2>&1
rc=$?
[ "$rc" -eq 2 ] && grep -q "'$tmp/cut/loss.csv' has the columns 'step,loss,val_loss,lr,grad_norm,tokens' where this run writes 'step,loss," "$tmp/c.log" ||
  fail "a resume onto a log of other columns: exit $rc, $(tail -1 "$tmp/c.log")"
cmp -s <(cut -d, -f1-6 "$tmp/a/loss.csv") "$tmp/cut/loss.csv" || fail "the log of other columns changed"

# A resume stopped within its first two steps keeps no durations of its own: the resumed run's
# durations.csv, of earlier steps than the new trace.json's, stays, and the summary says so (it
# stood beside the new trace unsaid). Steps of about half a second, so that the stop lands in
# the resume's second step.
slow=(--d-model 384 --heads 4 --layers 4 --pp 2 -m 2 --max-seq 64 --min-len 16 --max-len 64
      --eval-every 0 --eval-batches 1)
"$rrfp" train "${slow[@]}" --steps 3 --save-every 3 --out "$tmp/d" >/dev/null 2>&1 || fail "the slow run failed"
cp "$tmp/d/durations.csv" "$tmp/d-durations.csv"
"$rrfp" train "${slow[@]}" --steps 100 --save-every 1 --resume "$tmp/d/checkpoint.bin" \
  --out "$tmp/d" >"$tmp/d.log" 2>&1 &
pid=$!
wait_rows "$tmp/d" 4 || fail "no row of the resume's first step after 60 s"
kill -TERM $pid
wait $pid; rc=$?
stopped=$(tail -n 1 "$tmp/d/loss.csv" | cut -d, -f1)
if [ "$stopped" -le 5 ]; then
  [ "$rc" -eq 143 ] && grep -q "; durations.csv, of steps before 4, is the resumed run's, kept: this one kept none of its own$" "$tmp/d.log" ||
    fail "a resume stopped after step $stopped: exit $rc, $(tail -1 "$tmp/d.log")"
  cmp -s "$tmp/d/durations.csv" "$tmp/d-durations.csv" || fail "the resumed run's durations.csv changed"
else
  echo "note: the resume ran past its second step before the signal (step $stopped): not checked"
fi

# SIGTERM during a long validation (100000 batches after step 1) is honoured within a batch:
# the step stands, the run stops after it (it went on validating for over 100 s).
"$rrfp" train --d-model 32 --layers 4 --steps 3 --eval-every 1 --eval-batches 100000 \
  --save-every 1 --out "$tmp/v" >"$tmp/v.log" 2>&1 &
pid=$!
wait_rows "$tmp/v" 0 || fail "no loss.csv after 60 s (validation run)"
sleep 2  # step 1 (a few hundred ms) is done: it validates
kill -TERM $pid
for _ in $(seq 1 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
if kill -0 $pid 2>/dev/null; then
  kill -9 $pid
  fail "SIGTERM during validation: still running 10 s later"
fi
wait $pid; rc=$?
[ "$rc" -eq 143 ] || fail "SIGTERM during validation: exit $rc, want 143"
# The resume validates that step first and fills its row's val_loss (left empty for good).
[ "$(sed -n 2p "$tmp/v/loss.csv" | cut -d, -f3)" = "" ] || fail "step 1 validated before the stop"
# A resume stopped in that fill-in validation trains no step: the checkpoint and the row stay
# for the next resume (it trained step 2 and checkpointed past the row, left empty for good).
cp "$tmp/v/checkpoint.bin" "$tmp/v1.bin"
"$rrfp" train --d-model 32 --layers 4 --steps 3 --eval-every 1 --eval-batches 100000 \
  --save-every 1 --resume "$tmp/v/checkpoint.bin" --out "$tmp/v" >"$tmp/vf.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do grep -q "warning: --warmup" "$tmp/vf.log" && break; sleep 0.1; done
sleep 1  # the resume is validating step 1 (or about to: a stop first is the same stop)
kill -TERM $pid
wait $pid; rc=$?
[ "$rc" -eq 143 ] && grep -q "^stopped by SIGTERM before step 1's validation was filled in" "$tmp/vf.log" ||
  fail "SIGTERM in the fill-in validation: exit $rc, $(grep -E '^(done|stopped)' "$tmp/vf.log")"
[ "$(wc -l <"$tmp/v/loss.csv")" -eq 2 ] && [ "$(sed -n 2p "$tmp/v/loss.csv" | cut -d, -f3)" = "" ] &&
  cmp -s "$tmp/v/checkpoint.bin" "$tmp/v1.bin" ||
  fail "SIGTERM in the fill-in validation: a step was trained: $(cut -d, -f1-3 "$tmp/v/loss.csv" | tr '\n' ' ')"
"$rrfp" train --d-model 32 --layers 4 --steps 2 --eval-every 1 --eval-batches 2 \
  --save-every 1 --resume "$tmp/v/checkpoint.bin" --out "$tmp/v" >"$tmp/v2.log" 2>&1 ||
  fail "resume after a stopped validation: $(tail -1 "$tmp/v2.log")"
[ -n "$(sed -n 2p "$tmp/v/loss.csv" | cut -d, -f3)" ] && [ -n "$(sed -n 3p "$tmp/v/loss.csv" | cut -d, -f3)" ] ||
  fail "the resume did not validate step 1: $(cat "$tmp/v/loss.csv")"
# A resume stopped before it validates says so, whatever the earlier rows hold (their points
# are on its plot: it printed "validation 0.000 nats").
"$rrfp" train --d-model 32 --layers 4 --steps 2000 --eval-every 0 --save-every 1000 \
  --resume "$tmp/v/checkpoint.bin" --out "$tmp/v" >"$tmp/v3.log" 2>&1 &
pid=$!
wait_rows "$tmp/v" 4 || fail "no rows after 60 s (a resume stopped before validating)"
kill -TERM $pid
wait $pid
grep -q "validation not reached" "$tmp/v3.log" || fail "a resume stopped before validating: $(grep stopped "$tmp/v3.log")"

# SIGTERM during the last step's validation: the run is not whole, so exit 143, and the resume
# from its final checkpoint validates that step and fills its row (it exited 0, and the resume
# was refused as already at the last step: the validation was lost for good). Then it is whole.
"$rrfp" train --d-model 32 --layers 4 --steps 1 --eval-every 0 --eval-batches 100000 \
  --save-every 1 --out "$tmp/l" >"$tmp/l.log" 2>&1 &
pid=$!
wait_rows "$tmp/l" 0 || fail "no loss.csv after 60 s (last-step run)"
sleep 2  # the step (a few hundred ms) is done: it validates, its row waiting for that
kill -TERM $pid
wait $pid; rc=$?
[ "$rc" -eq 143 ] && grep -q "stopped by SIGTERM after step 1 of 1" "$tmp/l.log" ||
  fail "SIGTERM in the last validation: exit $rc, $(grep -E '^(done|stopped)' "$tmp/l.log")"
[ "$(sed -n 2p "$tmp/l/loss.csv" | cut -d, -f3)" = "" ] || fail "the last step validated before the stop"
"$rrfp" train --d-model 32 --layers 4 --steps 1 --eval-every 0 --eval-batches 2 \
  --resume "$tmp/l/checkpoint.bin" --out "$tmp/l" >"$tmp/l2.log" 2>&1 ||
  fail "resume of the last step's validation: $(tail -1 "$tmp/l2.log")"
grep -q "^done: step 1's validation, which a signal had cut short, is filled in" "$tmp/l2.log" &&
  [ -n "$(sed -n 2p "$tmp/l/loss.csv" | cut -d, -f3)" ] ||
  fail "the last step's validation was not filled in: $(cat "$tmp/l2.log" "$tmp/l/loss.csv")"
"$rrfp" train --d-model 32 --layers 4 --steps 1 --eval-every 0 \
  --resume "$tmp/l/checkpoint.bin" --out "$tmp/l" >"$tmp/l3.log" 2>&1
rc=$?
[ "$rc" -eq 2 ] && grep -q "already at step 1 of --steps 1" "$tmp/l3.log" ||
  fail "a whole run resumed again: exit $rc, $(tail -1 "$tmp/l3.log")"

# A run killed outright after its checkpoint logged steps past it: the resume drops those rows
# and logs them again, so every step has exactly one row.
"$rrfp" train "${small[@]}" --steps 2000 --save-every 3 --out "$tmp/k" >"$tmp/k.log" 2>&1 &
pid=$!
wait_rows "$tmp/k" 5 || fail "no loss rows after 60 s (kill -9 run)"
kill -9 $pid; wait $pid 2>/dev/null
ckpt_step=$(( ($(($(wc -l <"$tmp/k/loss.csv") - 1)) / 3) * 3 ))
"$rrfp" train "${small[@]}" --steps $((ckpt_step + 4)) --resume "$tmp/k/checkpoint.bin" \
  --out "$tmp/k" >"$tmp/k2.log" 2>&1 || fail "resume after kill -9 failed: $(tail -1 "$tmp/k2.log")"
[ "$(cut -d, -f1 "$tmp/k/loss.csv" | tail -n +2 | tr '\n' ' ')" = "$(seq -s ' ' 1 $((ckpt_step + 4))) " ] ||
  fail "loss.csv after kill -9 and resume: $(cut -d, -f1 "$tmp/k/loss.csv" | tr '\n' ' ')"
# ...and loss.svg plots every one of them, not only the resumed run's 4.
points=$(grep -o 'stroke="#4e79a7" stroke-width="1.5" points="[^"]*"' "$tmp/k/loss.svg" |
  sed 's/.*points="//; s/"$//' | wc -w)
[ "$points" -eq $((ckpt_step + 4)) ] ||
  fail "loss.svg after the resume plots $points steps of $((ckpt_step + 4))"
# A log with stray bytes, rows written twice and a row cut short (a crash mid-write): the
# resume keeps whole rows only, each step once (they were all kept and spliced in); of a step
# written twice, the last row, which the resume's check reads too (it kept the first: a bogus
# row before the checkpoint's step's real one passed the check and stayed).
real=$(tail -n 1 "$tmp/k/loss.csv")
{ awk -F, -v OFS=, 'NR == 1 { print; next } { r = $0; $2 = "9.99999"; print; print r }' \
    "$tmp/k/loss.csv"
  printf 'garbage\001\n'; echo "$real" | cut -c1-12; } >"$tmp/k/junk.csv"
mv "$tmp/k/junk.csv" "$tmp/k/loss.csv"
"$rrfp" train "${small[@]}" --steps $((ckpt_step + 6)) --resume "$tmp/k/checkpoint.bin" \
  --out "$tmp/k" >"$tmp/k3.log" 2>&1 || fail "resume of a log with junk failed: $(tail -1 "$tmp/k3.log")"
[ "$(cut -d, -f1 "$tmp/k/loss.csv" | tail -n +2 | tr '\n' ' ')" = "$(seq -s ' ' 1 $((ckpt_step + 6))) " ] ||
  fail "loss.csv after a resume of a log with junk: $(cut -d, -f1 "$tmp/k/loss.csv" | tr '\n' ' ')"
! grep -q ",9.99999," "$tmp/k/loss.csv" || fail "steps written twice: the resumed log kept bogus rows"

# Two SIGINTs: the first asks for a stop after the current step (long here: a bigger model),
# the second, while that step still runs, ends the process at once: exit 130, no outputs. The
# second comes a second after the first: within a quarter second it is the first's echo.
# Starts `rrfp train ARGS --out DIR` (its log DIR.log) as a job with job control on, which
# `set +m` ends after its wait: a background job of a script would otherwise ignore SIGINT (and
# rrfp keeps an inherited SIG_IGN, as a background job should). Waits for its first loss row;
# its pid in $pid.
start_for_signals() {  # DIR WHAT ARGS...
  local dir=$1 what=$2
  shift 2
  set -m
  "$rrfp" train "$@" --out "$dir" >"$dir.log" 2>&1 &
  pid=$!
  wait_rows "$dir" 1 || fail "no loss rows after 60 s ($what)"
}
start_for_signals "$tmp/b" "second run" --d-model 512 --heads 8 --layers 8 --eval-every 0 --steps 50
kill -INT $pid
sleep 0.2
kill -0 $pid 2>/dev/null || fail "the first SIGINT did not let the step finish"
sleep 0.8
kill -0 $pid 2>/dev/null || fail "the step ended within a second: too short for this test"
kill -INT $pid
wait $pid; rc=$?
set +m
[ "$rc" -eq 130 ] || fail "SIGINT twice: exit $rc, want 130"
[ ! -e "$tmp/b/loss.svg" ] && ! grep -q "stopped by SIG" "$tmp/b.log" ||
  fail "the second SIGINT did not exit at once (outputs written)"
# A SIGINT sent twice at once is one request: GNU timeout sends its signal to the process,
# then to its process group, the process again (taken as a second request, that echo ended
# `timeout -s INT 20 rrfp train` at once, without its checkpoint, in a quarter of the runs).
start_for_signals "$tmp/e" "echo run" --d-model 256 --heads 4 --layers 4 --eval-every 0 --steps 50
# 50 ms apart, without starting a process between them (a sleep, slow to start under load,
# could part them by more than the echo's window; back to back, the two could merge into one
# pending signal and the echo go untested): a read that times out on a FIFO nobody writes.
mkfifo "$tmp/never"
exec 9<>"$tmp/never"
kill -INT $pid
read -r -t 0.05 -u 9 || true
kill -INT $pid 2>/dev/null
exec 9>&-
wait $pid; rc=$?
set +m
[ "$rc" -eq 130 ] && [ -e "$tmp/e/loss.svg" ] && grep -q "stopped by SIGINT" "$tmp/e.log" ||
  fail "SIGINT twice at once: exit $rc, $(tail -1 "$tmp/e.log")"
# A full disk (writes fail with ENOSPC: the file is made a link to /dev/full, which refuses every
# write that way): the checkpoint of step 2 fails, the one of step 1 stays, no partial file.
mkdir -p "$tmp/full"
"$rrfp" train "${small[@]}" --steps 1 --save-every 1 --out "$tmp/full" >/dev/null 2>&1 ||
  fail "full disk: the first run failed"
cp "$tmp/full/checkpoint.bin" "$tmp/step1.bin"
ln -s /dev/full "$tmp/full/checkpoint.bin.tmp"
"$rrfp" train "${small[@]}" --steps 2 --save-every 1 --resume "$tmp/full/checkpoint.bin" \
  --out "$tmp/full" >"$tmp/full.log" 2>&1
rc=$?
[ "$rc" -eq 1 ] || fail "full disk (checkpoint): exit $rc, want 1"
[ "$(grep -c "No space left on device" "$tmp/full.log")" -eq 1 ] ||
  fail "full disk (checkpoint): no one line saying so: $(tail -2 "$tmp/full.log")"
[ ! -L "$tmp/full/checkpoint.bin.tmp" ] || fail "full disk: the partial file was left"
cmp -s "$tmp/full/checkpoint.bin" "$tmp/step1.bin" || fail "full disk: the previous checkpoint changed"
# The checkpoint's path taken by a directory before the run: refused before its first step
# (exit 2; it trained every step, then failed at the save).
rm -rf "$tmp/dirck" && mkdir -p "$tmp/dirck/checkpoint.bin"
"$rrfp" train "${small[@]}" --steps 1 --save-every 1 --out "$tmp/dirck" >"$tmp/dirck.log" 2>&1
rc=$?
[ "$rc" -eq 2 ] && grep -q "checkpoint.bin' is a directory, not a file" "$tmp/dirck.log" &&
  [ ! -e "$tmp/dirck/loss.csv" ] || fail "checkpoint path a directory before the run: exit $rc"
# ...and during the run: the save fails as a run failure (exit 1, one line naming it), not as a
# usage error (exit 2, as it was).
rm -rf "$tmp/dirck" && mkdir "$tmp/dirck"
"$rrfp" train "${small[@]}" --steps 40 --save-every 40 --out "$tmp/dirck" >"$tmp/dirck.log" 2>&1 &
pid=$!
wait_rows "$tmp/dirck" 1 || fail "no loss rows after 60 s (checkpoint path run)"
mkdir "$tmp/dirck/checkpoint.bin"
wait $pid
rc=$?
[ "$rc" -eq 1 ] || fail "checkpoint path a directory: exit $rc, want 1"
[ "$(grep -c "cannot rename .* over it" "$tmp/dirck.log")" -eq 1 ] ||
  fail "checkpoint path a directory: no one line saying so: $(tail -2 "$tmp/dirck.log")"
# A file written at the run's end taken by a directory during the run: the run's failure
# (exit 1), in one line naming --out and the file (it exited 2 naming --trace, a flag `train`
# does not have).
rm -rf "$tmp/dirtr" && mkdir "$tmp/dirtr"
"$rrfp" train "${small[@]}" --steps 40 --out "$tmp/dirtr" >"$tmp/dirtr.log" 2>&1 &
pid=$!
wait_rows "$tmp/dirtr" 1 || fail "no loss rows after 60 s (trace path run)"
mkdir "$tmp/dirtr/trace.json"
wait $pid
rc=$?
[ "$rc" -eq 1 ] && [ "$(grep -c "^rrfp: " "$tmp/dirtr.log")" -eq 1 ] &&
  grep -q "^rrfp: run failed: --out: '$tmp/dirtr/trace.json' is a directory, not a file" "$tmp/dirtr.log" ||
  fail "trace.json a directory: exit $rc, $(grep "^rrfp: " "$tmp/dirtr.log")"
# loss.csv on a full disk: the first row fails, and says so.
rm -rf "$tmp/full2" && mkdir "$tmp/full2" && ln -s /dev/full "$tmp/full2/loss.csv"
"$rrfp" train "${small[@]}" --steps 2 --out "$tmp/full2" >"$tmp/full2.log" 2>&1
rc=$?
[ "$rc" -eq 1 ] && grep -q "writing '$tmp/full2/loss.csv' failed: No space left on device" "$tmp/full2.log" ||
  fail "full disk (loss.csv): exit $rc: $(tail -1 "$tmp/full2.log")"

# Its standard output's reader gone (`| head -1`, a `| tee` that a Ctrl-C ended first): the
# run stops at its next step as under SIGTERM, with its checkpoint and files, exit 141 (it died
# at its next line, without the checkpoint).
"$rrfp" train "${small[@]}" --steps 2000 --save-every 3 --out "$tmp/p" 2>"$tmp/p.err" |
  head -1 >/dev/null
rc=${PIPESTATUS[0]}
[ "$rc" -eq 141 ] || fail "train | head -1: exit $rc, want 141: $(tail -1 "$tmp/p.err")"
# Said on stderr, since what it printed went nowhere (the stop was without a word).
grep -q "^rrfp train: stopped by SIGPIPE (a pipe it wrote to closed) after step [0-9]* of 2000 (checkpoint $tmp/p/checkpoint.bin)" "$tmp/p.err" ||
  fail "train | head -1: no stop line on stderr: $(cat "$tmp/p.err")"
[ -s "$tmp/p/checkpoint.bin" ] && [ -s "$tmp/p/trace.json" ] ||
  fail "train | head -1: no checkpoint or trace: $(ls "$tmp/p")"

# The same with SIGPIPE ignored (`trap '' PIPE`, as service managers start commands): the write
# that fails with EPIPE is the request (it ran all its steps, then exited 1, "writing standard
# output failed"). Its progress line is printed every 25 steps, so it stops within 50 or so.
(
  trap '' PIPE
  "$rrfp" train "${small[@]}" --steps 2000 --out "$tmp/ip" 2>"$tmp/ip.err" | head -1 >/dev/null
  echo "${PIPESTATUS[0]}" >"$tmp/ip.rc"
)
rows=$(($(wc -l <"$tmp/ip/loss.csv") - 1))
[ "$(cat "$tmp/ip.rc")" = 141 ] && [ "$rows" -lt 200 ] && [ -s "$tmp/ip/trace.json" ] ||
  fail "SIGPIPE ignored, train | head -1: exit $(cat "$tmp/ip.rc") after $rows steps: $(tail -1 "$tmp/ip.err")"

# Past a file size limit (`ulimit -f`) the checkpoint fails in one line, its temporary removed:
# SIGXFSZ killed the run, exit 153, and left OUT/checkpoint.bin.tmp (the limit is under the
# 0.8 MB checkpoint and over the log).
(ulimit -f 200; "$rrfp" train "${small[@]}" --steps 2 --save-every 1 --out "$tmp/fs" \
  >/dev/null 2>"$tmp/fs.err")
rc=$?
[ "$rc" -eq 1 ] && grep -q "checkpoint '$tmp/fs/checkpoint.bin': writing failed: File too large" "$tmp/fs.err" ||
  fail "checkpoint past a size limit: exit $rc: $(tail -1 "$tmp/fs.err")"
ls -A "$tmp/fs" | grep -q 'tmp$' && fail "checkpoint past a size limit left $(ls -A "$tmp/fs" | grep 'tmp$')"

# A signal during set-up (LibTorch loading, a large corpus read) ends the run at once, nothing
# written: it was taken as a stop after the first step, which ran after seconds of reading, or,
# while LibTorch loaded, ended the process without a word. Sent once the process is rrfp-train.
mkdir -p "$tmp/big" && yes "a line of a large corpus, read before the first step" |
  head -c 200000000 >"$tmp/big/a.txt"
# An earlier run's log in the folder is left, and the line says it was there.
mkdir -p "$tmp/su" && echo "an earlier run's" >"$tmp/su/loss.csv"
"$rrfp" train "${small[@]}" --steps 5 --data "$tmp/big" --out "$tmp/su" >"$tmp/su.log" 2>&1 &
pid=$!
for _ in $(seq 1 20000); do
  read -r comm <"/proc/$pid/comm" 2>/dev/null || break
  [ "$comm" = rrfp-train ] && break
done
kill -TERM $pid
wait $pid; rc=$?
[ "$rc" -eq 143 ] &&
  grep -qx "rrfp train: stopped by SIGTERM; nothing written; $tmp/su/loss.csv was there before it began" \
    "$tmp/su.log" && [ "$(cat "$tmp/su/loss.csv")" = "an earlier run's" ] ||
  fail "SIGTERM in set-up: exit $rc, $(tail -1 "$tmp/su.log"), $(ls "$tmp/su" 2>&1)"
rm -rf "$tmp/big"

# A signal while a resume rewrites its log stops the run before its first step, the checkpoint
# as it was and the log holding the steps up to it: it was taken for a stop after that step, which ran and was logged
# past its checkpoint. A checkpoint made one of step 1,000,000 (its header's step changed, its
# checksum, FNV-1a over all before it, made again) and a log of as many rows make it last.
"$rrfp" train "${small[@]}" --steps 2 --save-every 2 --out "$tmp/r0" >/dev/null 2>&1 ||
  fail "a 2-step run failed"
mkdir -p "$tmp/r"
/usr/bin/python3 - "$tmp/r0" "$tmp/r" 1000000 <<'PY'
import json, struct, sys
src, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
b = open(src + "/checkpoint.bin", "rb").read()
at = b.index(b'{"')
size = struct.unpack("<Q", b[at - 8:at])[0]
head = json.loads(b[at:at + size])
head["step"] = n
text = json.dumps(head, separators=(",", ":")).encode()
body = b[:at - 8] + struct.pack("<Q", len(text)) + text + b[at + size:-8]
h = 1469598103934665603
for c in body:
    h = ((h ^ c) * 1099511628211) & (2**64 - 1)
open(out + "/checkpoint.bin", "wb").write(body + struct.pack("<Q", h))
rows = open(src + "/loss.csv").read().splitlines()
rest = rows[-1].split(",", 1)[1]
with open(out + "/loss.csv", "w") as f:
    f.write(rows[0] + "\n" + "".join(f"{i},{rest}\n" for i in range(1, n + 1)))
PY
cp "$tmp/r/loss.csv" "$tmp/r.csv" && cp "$tmp/r/checkpoint.bin" "$tmp/r.bin"
"$rrfp" train "${small[@]}" --steps 1000005 --resume "$tmp/r/checkpoint.bin" --out "$tmp/r" \
  >"$tmp/r.log" 2>&1 &
pid=$!
for _ in $(seq 1 30000); do [ -e "$tmp/r/loss.csv.tmp" ] && break; sleep 0.002; done
kill -TERM $pid
wait $pid; rc=$?
[ "$rc" -eq 143 ] &&
  grep -qx "stopped by SIGTERM before step 1000001: no step trained; the checkpoint is as it was, and loss.csv holds the steps up to it" "$tmp/r.log" &&
  cmp -s "$tmp/r/loss.csv" "$tmp/r.csv" && cmp -s "$tmp/r/checkpoint.bin" "$tmp/r.bin" ||
  fail "SIGTERM in a resume's log rewrite: exit $rc, $(tail -1 "$tmp/r.log")"
rm -rf "$tmp/r" "$tmp/r.csv"

echo "train signal and full-disk checks: $fails failed"
[ "$fails" -eq 0 ]
