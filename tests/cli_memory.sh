#!/usr/bin/env bash
# Work bigger than the memory rrfp may take is refused before it starts, naming its estimate,
# the memory and what to lower (RRFP_MEMORY_LIMIT stands in for a small machine), and a budget
# or a thread limit the work cannot keep is said in one line (docs/reliability.md).
# Usage: cli_memory.sh PATH/TO/rrfp [ON|OFF: whether the build has LibTorch]
source "$(dirname "$0")/cli_check.sh"
# Runs bigger than the memory rrfp may take are refused before they start, with the estimate
# and the memory (RRFP_MEMORY_LIMIT stands in for a small machine); one that fits runs. A
# budget is kept: a plan whose first start order outlasts it stops there, saying so.
export RRFP_MEMORY_LIMIT=64M
check "simulate: 4 runs of up to 3.1M tasks: about 143 MB of memory" simulate --pp 1024 -m 1024
# A run's estimate follows what it holds: a list hint's order (a blocking run's rendezvous holds
# only the sends in flight, and costs nothing more).
check "simulate: 1 run of 2.1M tasks: about 96 MB" simulate --pp 1024 -m 1024 --hint bf --policy ready
check "simulate: 1 run of 2.1M tasks: about 113 MB" simulate --pp 1024 -m 1024 --hint 1f1b --policy fixed --comm blocking
check "RRFP_MEMORY_LIMIT allows 67 MB: lower --pp, --microbatches or --tp" run --pp 1024 -m 1024 --hint bf
# An agree round's proposals grow as T^2 a task: estimated as a leader's (18 MB, 0.2 s), this
# run took 185 MB and 42 s.
check "simulate: 1 run of 0.3M tasks: about 219 MB of memory and 67 s of work" \
  simulate --pp 8 -m 32 --tp 512 --tp-protocol agree --hint bf --policy ready
# `run` holds its runtime's state and every run's timed records beside a simulation's bytes: a
# shape a simulation of which fits may not.
check "run: 2 runs of up to 1.2M tasks, 1 timed step each: about 720 MB of memory" run --pp 2 -m 300000 --hint bf
# A timeline keeps every task's record and draws it: a shape that fits without one may not.
check "simulate: 1 run of 0.5M tasks: about 184 MB of memory" simulate --pp 512 -m 512 --hint bf --policy ready --trace "$tmp/t.json"
check "or leave out --trace and --svg" simulate --pp 512 -m 512 --hint bf --policy ready --svg "$tmp/t.svg"
check "schedule show: 0.5M tasks and 1.0M diagram cells: about 127 MB" schedule show --pp 512 -m 512
# Sized again at the diagram's width: a serial list at P=M=200 leaves most stages idle most of
# the time (16M cells where its shape gives 0.2M; it ran to 754 MB under a limit of 150).
/usr/bin/python3 -c "import sys
lines = ['rrfp-hint 1 pp=200 vpp=1 microbatches=200 placement=loop split=0']
for s in range(200):
    lines.append('stage %d: ' % s + ' '.join('F%d:%d B%d:%d' % (s, m, s, m) for m in range(200)))
open(sys.argv[1], 'w').write(chr(10).join(lines) + chr(10))" "$tmp/serial.txt"
RRFP_MEMORY_LIMIT=150M check "schedule show: 0.1M tasks and 16.0M diagram cells: about" \
  schedule show --hint "$tmp/serial.txt" --pp 200 -m 200
check "plan: orders of 1.0M tasks" plan --pp 512 -m 512 --tp 2
# Tasks times TP counted in int: "orders of -1295.0M tasks".
check "plan: orders of 3000.0M tasks" plan --pp 1000 -m 5000 --tp 300
# Each stage's own state counts beside its tasks: P=1M M=1 was estimated at 0.38 GB and took 1.57
# GB (at P=50M the kernel killed it at 24 GB); refused before its work model is built.
check "plan: orders of 2.0M tasks: about 2.1 GB of memory" plan --pp 1000000 -m 1
# Each stage's own state counts beside its tasks (at M=1 it is most of a run), and a diagram's
# cells beside the tasks it shows; `schedule check` is sized before it builds its model.
check "simulate: 1 run of 0.2M tasks: about 159 MB" simulate --pp 100000 -m 1 --hint bf --policy ready
check "schedule check: 2.0M tasks: about 1.8 GB" schedule check "$tmp/none.txt" --pp 1000000 -m 1
# sweep takes the same checks, at its largest point (it ran a point simulate refuses), and its
# grid is counted before it is built (2e9 seeds ended "out of memory", exit 1).
check "sweep: 1 grid point, runs of up to 12.6M tasks: about 668 MB of memory" sweep --pp 1024 --mb-factors 4 --seeds 1 --workloads uniform --hints bf
check "sweep: the grid (--workloads x --pp x --mb-factors x --tp x --limits x --seeds) has 16000000000 points; at most 1000000" sweep --seeds 2000000000
# A mistyped workload is named before any point runs (found when the loop reached it, the
# points run before were lost).
check "--workloads: unknown preset 'multimodl'" sweep --workloads language,multimodl --pp 2 --mb-factors 1 --seeds 1
# JSON is bounded by what its parse takes, not by its size alone (255 MiB of `{}` took 8.4 GB;
# three such files of a trace directory ended in an uncaught bad_alloc): a file, then a
# directory whose files fit one by one but not together.
/usr/bin/python3 -c "open('$tmp/objs.json', 'w').write('[' + ','.join(['{}'] * 700000) + ']')"
mkdir -p "$tmp/objdir"
for i in 0 1 2; do
  /usr/bin/python3 -c "open('$tmp/objdir/r$i.json', 'w').write('[' + ','.join(['{}'] * 250000) + ']')"
done
check "objs.json: parsing the trace: about 81 MB of memory; RRFP_MEMORY_LIMIT allows 67 MB" simulate --replay "$tmp/objs.json" --pp 2 -m 2
check "3 trace files: parsing the trace: about 87 MB" simulate --replay "$tmp/objdir" --pp 2 -m 2
# The files of a folder are held together: their sizes are costed before the first is read
# (12 sparse files of 250 MB took 3 GB before any check).
mkdir -p "$tmp/sparse" && for i in 0 1 2; do truncate -s 200M "$tmp/sparse/r$i.json"; done
check "/sparse: reading its 3 trace files: about 629 MB of memory; RRFP_MEMORY_LIMIT allows 67 MB" predict "$tmp/sparse"
rm -rf "$tmp/sparse"
# So is one file's (a 41 MB trace under a 60 MB `ulimit -v` ended in a bare "out of memory").
truncate -s 100M "$tmp/one.json"
check "one.json: reading the trace: about 105 MB of memory; RRFP_MEMORY_LIMIT allows 67 MB: lower the trace's size" predict "$tmp/one.json"
rm -f "$tmp/one.json"
"$rrfp" simulate --pp 64 -m 64 --hint bf --policy ready >/dev/null ||
  { echo "FAIL: a run within RRFP_MEMORY_LIMIT"; fails=$((fails + 1)); }
RRFP_MEMORY_LIMIT=lots check "RRFP_MEMORY_LIMIT: 'lots' is not a size" simulate
# Decimal only, at least a byte, blanks ignored on both sides: 0x10 was 16 bytes, 0.5 was 0
# (no limit at all) and "1G " no size.
for v in 0x10 0.5 1e9 1.5.K; do
  RRFP_MEMORY_LIMIT=$v check "RRFP_MEMORY_LIMIT: '$v' is not a size (decimal bytes, or a number with K, M or G; from 1 byte to 10^18)" simulate
done
RRFP_MEMORY_LIMIT="8G " "$rrfp" simulate --pp 4 -m 4 >/dev/null 2>&1 ||
  { echo "FAIL: RRFP_MEMORY_LIMIT='8G ' refused"; fails=$((fails + 1)); }
RRFP_MEMORY_LIMIT=1.5K check "RRFP_MEMORY_LIMIT allows 1536 bytes" simulate --pp 4 -m 4
unset RRFP_MEMORY_LIMIT
check "available: lower --pp, --microbatches or --tp" simulate --pp 4096 -m 3125 --tp 1024 --hint bf --policy ready
# The M x P^2 check leaves out TP: this grid point passed it and started.
check "available: lower --pp, --mb-factors, --tp or --seeds" sweep --pp 4096 --mb-factors 2 --tp 1024 --seeds 1
"$rrfp" plan --pp 256 -m 256 --budget 0.05 --exact off >"$tmp/plan.txt" 2>&1 &&
  grep -q -- "its --budget of 0.05 s was spent before" "$tmp/plan.txt" ||
  { echo "FAIL: plan --budget 0.05 at 256x256 kept no budget:"; cat "$tmp/plan.txt"; fails=$((fails + 1)); }
# A machine that cannot start every compute thread (3 GB of address space, 1,600 threads for
# --tp 200): the run fails in its last line, exit 1 (it aborted, "terminate called without an
# active exception").
# Sanitized builds do not start under such a limit at all: the probe skips them.
if (ulimit -v 3000000 && "$rrfp" --help >/dev/null 2>&1); then
  (ulimit -v 3000000 && timeout 60 "$rrfp" run --tp 200 >/dev/null 2>"$tmp/thr.err"); rc=$?
  if [ "$rc" -ne 1 ] ||
    ! tail -1 "$tmp/thr.err" | grep -q "run failed: runtime: could not start compute thread .* lower --tp or --pp"; then
    echo "FAIL: run --tp 200 under a 3 GB address limit -> rc=$rc: $(head -c 300 "$tmp/thr.err")"
    fails=$((fails + 1))
  fi
  # Output buffers that would take more than a quarter of the limit are not mapped ahead (4
  # stages, at most 4 outputs of each kind out at once, 32 MiB each: 1 GiB), and the run says so.
  (ulimit -v 3000000 && timeout 60 "$rrfp" run --pp 4 -m 8 --workload uniform --hint 1f1b \
    --policy fixed >"$tmp/ahead.txt" 2>&1); rc=$?
  if [ "$rc" -ne 0 ] || ! grep -q "output buffers not mapped ahead: 1024 MiB would take more \
than a quarter of the memory limit (ulimit -v or -d)" "$tmp/ahead.txt"; then
    echo "FAIL: run under a 3 GB address limit -> rc=$rc: $(tail -c 400 "$tmp/ahead.txt")"
    fails=$((fails + 1))
  fi
  # A message whose buffer (4 GiB) the limit cannot map is refused before the run, naming
  # bytes_per_token (the task that mapped it failed, exit 1). The run's line comes first.
  echo '{"preset":"uniform","bytes_per_token":1e6}' >"$tmp/huge.json"
  (ulimit -v 3000000 && timeout 60 "$rrfp" run --pp 2 -m 2 --workload-file "$tmp/huge.json" \
    --hint bf --policy ready >/dev/null 2>"$tmp/huge.err"); rc=$?
  if [ "$rc" -ne 2 ] || ! tail -1 "$tmp/huge.err" | grep -q "^rrfp: error: run: a message's buffer \
takes 4.3 GB (the largest message: 4.1 GB, .*), more than this machine maps in one allocation \
(.* GB: its RAM and swap or commit limit, or what ulimit -v or -d leaves): lower the workload's bytes_per_token$"; then
    echo "FAIL: run of 4 GB messages under a 3 GB address limit -> rc=$rc: $(head -c 400 "$tmp/huge.err")"
    fails=$((fails + 1))
  fi
else
  echo "skipped: the checks under a 3 GB address limit (this build does not start under one:" \
    "a sanitized build?)"
fi
# The same under a limit on data alone (ulimit -d, which counts private mappings): the buffers
# mapped ahead took the compute threads' stacks' room, and the run blamed --pp or --tp.
if (ulimit -d 3000000 && "$rrfp" --help >/dev/null 2>&1); then
  (ulimit -d 3000000 && timeout 60 "$rrfp" run --pp 4 -m 8 --workload uniform --hint 1f1b \
    --policy fixed >"$tmp/ahead-d.txt" 2>&1); rc=$?
  if [ "$rc" -ne 0 ] || ! grep -q "output buffers not mapped ahead: 1024 MiB would take more \
than a quarter of the memory limit (ulimit -v or -d)" "$tmp/ahead-d.txt"; then
    echo "FAIL: run under a 3 GB data limit -> rc=$rc: $(tail -c 400 "$tmp/ahead-d.txt")"
    fails=$((fails + 1))
  fi
else
  echo "skipped: the check under a 3 GB data limit (this build does not start under one:" \
    "a sanitized build?)"
fi
# calibrate, whose endpoints are threads: one that cannot be started (30 MB of address space)
# fails the command in a line (it aborted, "terminate called without an active exception");
# messages that the address space cannot hold (150 MB and 32 MiB messages) are refused before
# any endpoint starts (an endpoint out of memory stopped the others: they went on, each round
# waiting out its 60 s deadline for the missing peer, past 118 s).
if (ulimit -v 30000 && "$rrfp" --help >/dev/null 2>&1); then
  for case in "30000:8:1:run failed: could not start the calibration's thread of endpoint" \
    "150000:8,32M:2:error: --sizes: about 403 MB of memory for 4 endpoint(s) in this process; the address-space limit (ulimit -v) leaves"; do
    IFS=: read -r limit sizes want line <<<"$case"
    (ulimit -v "$limit" && timeout 30 "$rrfp" calibrate --seconds 4 --sizes "$sizes" >/dev/null \
      2>"$tmp/cal.err"); rc=$?
    if [ "$rc" -ne "$want" ] || ! tail -1 "$tmp/cal.err" | grep -qF "rrfp: $line"; then
      echo "FAIL: calibrate under ulimit -v $limit -> rc=$rc: $(head -c 300 "$tmp/cal.err")"
      fails=$((fails + 1))
    fi
  done
fi
# run under 16 MB: the first thread it starts (the messages' delay line) cannot be; the line
# says why (it said "internal error: Resource temporarily unavailable"). Messages of a few
# bytes: the default's (80 MB) are refused before, as no buffer of theirs can be mapped.
if (ulimit -v 16000 && "$rrfp" --help >/dev/null 2>&1); then
  echo '{"preset":"multimodal","bytes_per_token":0.01}' >"$tmp/tiny.json"
  (ulimit -v 16000 && timeout 30 "$rrfp" run --pp 4 -m 8 --workload-file "$tmp/tiny.json" \
    >/dev/null 2>"$tmp/delay.err"); rc=$?
  if [ "$rc" -ne 1 ] || ! tail -1 "$tmp/delay.err" |
    grep -q "run failed: could not start the runtime's message delay thread (.*): this \
machine's thread or memory limit"; then
    echo "FAIL: run under ulimit -v 16000 -> rc=$rc: $(head -c 300 "$tmp/delay.err")"
    fails=$((fails + 1))
  fi
fi
# Output buffers of small messages mapped ahead hold a page each (the allocator's header): 8192
# of them at P=64 M=64, 32 MiB, past a quarter of RRFP_MEMORY_LIMIT 100M: not mapped ahead, and
# said (they were mapped whatever the memory: 2.3 GB at P=512 M=512, reported as address space
# never written). Under 200M they are.
echo '{"preset":"uniform","forward_us":20,"bytes_per_token":0.01}' >"$tmp/small.json"
for case in "100M:not mapped ahead: 32 MiB would take more than a quarter of the memory \
available (a page of each buffer)" "200M:mapped ahead (address space, never written in one \
process but for a page each): 512 MiB"; do
  RRFP_MEMORY_LIMIT=${case%%:*} timeout 60 "$rrfp" run --pp 64 -m 64 --hint bf --policy ready \
    --workload-file "$tmp/small.json" --warmup 0 --warmup-extra 0 >"$tmp/small.txt" 2>&1 ||
    { echo "FAIL: run of small messages under ${case%%:*}: $(tail -c 300 "$tmp/small.txt")"
      fails=$((fails + 1)); }
  grep -qF "output buffers ${case#*:}" "$tmp/small.txt" ||
    { echo "FAIL: under RRFP_MEMORY_LIMIT ${case%%:*}: $(tail -c 300 "$tmp/small.txt")"
      fails=$((fails + 1)); }
done
# A calibration budget its sizes cannot keep is refused at once (it took 10-23 s for 0.1 s).
check "--seconds: 0.1 s cannot hold a calibration of these --sizes between 4 endpoints, which takes about 14 s" calibrate --sizes 1024M --seconds 0.1
# Below 10 s the floor is said to a tenth: 0.57 s said "give --seconds 1", where 0.6 runs.
check "which takes about 0.6 s at the least (every repetition at its fewest round trips); give --seconds 0.6 or more" calibrate --seconds 0.5
# The diagram's second check, once the run gives its width, weighs the whole need against what
# there was before the run: against what its own allocations left, a run that fits (about 0.36
# GB under a 0.5 GB address space) was refused after doing all its work. Where the build maps
# too much for such a limit (a sanitizer's shadow), not checked.
if (ulimit -v 500000 && "$rrfp" --help >/dev/null 2>&1); then
  (ulimit -v 500000 && exec timeout 60 "$rrfp" schedule show --pp 1 -m 1000000) \
    >/dev/null 2>"$tmp/err" || { echo "FAIL: schedule show -m 1000000 under ulimit -v 500000:" \
    "$(cat "$tmp/err")"; fails=$((fails + 1)); }
fi
echo "cli memory checks: $fails failed"
[ "$fails" -eq 0 ]
