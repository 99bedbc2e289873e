#!/usr/bin/env bash
# Bad input to the CLI: exit code 2 and exactly one line on stderr naming the problem; never a
# crash (training's: cli_bad_train_input.sh). Usage: cli_bad_input.sh PATH/TO/rrfp [ON|OFF:
# whether the build has LibTorch]
here=$(cd "$(dirname "$0")" && pwd)
source "$here/cli_check.sh"
check "unknown hint 'nope'" simulate --hint nope
# A mistyped or missing command is named, with the commands there are (CLI11 said "A
# subcommand is required").
check "unknown command 'simulat' (commands: train, simulate, run," simulat --pp 4
check "a command is required (commands: train, simulate,"
# So under `schedule`, whose show and check were "A subcommand is required" too.
check "unknown command 'schedule shwo' (commands: schedule show, schedule check)" schedule shwo
# Before --help too: it printed the help of the command above, exit 0.
check "unknown command 'experiment' (commands: train, simulate," experiment --help
check "unknown command 'schedule shwo' (commands: schedule show, schedule check)" schedule shwo --help
check "a command is required (commands: schedule show, schedule check; rrfp schedule --help)" schedule
# A rank left in the environment without mpirun hid every parse error behind a silent 10 s wait.
OMPI_COMM_WORLD_RANK=1 check "--pp: must be at least 1" simulate --pp 0
check "unknown preset 'nope'" simulate --workload nope
check "--pp: must be at least 1" simulate --pp 0
check "--ordered-forwards: maybe not in {auto,on,off}" simulate --ordered-forwards maybe
check "--ordered-forwards: maybe not in {on,off}" schedule show --ordered-forwards maybe
check "--ordered-forwards: maybe not in {auto,on,off}" predict --ordered-forwards maybe x.json
check "--microbatches: must be at least 1" simulate --microbatches 0
check "needs --vpp 1" simulate --vpp 2 --hint 1f1b
check "--limit: must be 0 (default) or at least 1, got -1" simulate --hint bf --limit -1
# The fixed policy runs its list, which alone decides what a stage holds: a --limit there was
# taken and ignored (gpipe held 4 a stage under --limit 1).
check "--limit: bounds the ready policy's activations; --policy fixed runs the hint's order" simulate --hint gpipe --policy fixed --limit 1
# (A build without LibTorch answers every train with that first.)
[ "$trains" = OFF ] ||
  check "--limit: bounds the ready policy's activations" train --hint 1f1b --policy fixed --limit 2
check "--max-pending-w: caps the ready policy's deferred W tasks" simulate --hint zb-h1 --policy fixed --max-pending-w 2
# Nor is there a W task to cap where the backward is not split (it was taken and ignored); the
# default comparison's BFW splits it under auto, so there the cap stands.
check "--max-pending-w: caps the deferred W tasks of a split backward; --split-backward auto keeps the backward whole here (it splits it for zb-*" simulate --hint bf --max-pending-w 2
check "--max-pending-w: caps the deferred W tasks of a split backward; --split-backward off keeps" run --pp 2 -m 2 --split-backward off --max-pending-w 2
check "--split-backward auto keeps the backward whole here (it splits it for a --replay that recorded W tasks)" plan --pp 2 -m 2 --max-pending-w 2
check "--hint zb-h1: needs --split-backward on" simulate --hint zb-h1 --split-backward off --max-pending-w 2
# Adaptive wants the split but runs without it: the cap was taken and ignored.
check "--max-pending-w: caps the deferred W tasks of a split backward; --split-backward off keeps" simulate --hint adaptive --split-backward off --max-pending-w 2
"$rrfp" simulate --pp 2 -m 4 --max-pending-w 2 >/dev/null 2>"$tmp/err" ||
  { echo "FAIL: simulate --max-pending-w 2 with BFW in the comparison: $(cat "$tmp/err")"; fails=$((fails + 1)); }
# A sweep's grid value given twice ran and counted its points twice; --tp-protocol none
# diverged in the collectives and failed the grid with exit 1.
check "--pp: 2 is given twice; each value is a dimension of the grid" sweep --pp 2,2
check "--workloads: '' names nothing; give a value" sweep --workloads ''
check "--hints: bf is given twice" sweep --hints bf,bfw,bf
# An empty item was dropped before any check saw it, and the grid ran without a word.
check "--hints: 'bf,,bfw' holds an empty item" sweep --hints bf,,bfw
check "--pp: '2,' holds an empty item" sweep --pp=2,
check "--hints: unknown hint 'bfx' (expected one of gpipe, 1f1b, interleaved-1f1b, bfs, zb-h1, zb-h2, zb-v, bf, fb, b-priority, f-priority, bfw, adaptive)" sweep --hints bfx
# A flag of another command, or a stray value: the first word not taken, by name (CLI11 listed
# them all, in reverse: "not expected: 2 --vpp").
check "--vpp: rrfp sweep has no such flag (rrfp sweep --help lists its flags)" sweep --pp 2 --vpp 2
check "'extra': rrfp schedule show takes no such value" schedule show --pp 2 extra
check "--pp: a flag of rrfp plan, given before its name; give it after \`plan\`" --pp 2 plan
check "'-m': rrfp plan takes no such value" plan --pp 2 -- -m 3
# The flag given before \`--\` too: the word left is the one after it (it was told to give the
# flag after the command's name, which it was).
check "'--pp': rrfp plan takes no such value" plan --pp 2 -- --pp 3
check "'-3': rrfp simulate takes no such value" simulate --pp 2 -m 4 --limit 2 -3
check "--tp-protocol: expected leader or agree, got 'none'" sweep --tp-protocol none
# plan's ready starts and annealing all diverged under none: it reported an order 45% longer
# than leader's (98.9 against 143.5 ms at P=4 M=8 T=2 on paper-comm), exit 0.
check "--tp-protocol: expected leader or agree, got 'none' (the plan's start hints" plan --pp 4 -m 8 --tp 2 --tp-protocol none
check "--tp-protocol: expected leader or agree, got 'foo'" plan --pp 3 -m 4 --tp 2 --tp-protocol foo
# P x M past 2^64 wrapped to 0 in 64-bit integers: the grid passed, estimated at "-nan GB".
check "--mb-factors: 4194304 x --pp 2097152 microbatches on 2097152 stages exceed the 50000000 chunk-microbatches of a step" sweep --pp 2097152 --mb-factors 4194304 --csv "$tmp/sw.csv"
# A grid with no TP group took --tp-protocol and ignored it, its CSV the default's.
check "--tp-protocol: how the tensor-parallel ranks of a stage coordinate; at --tp 1 a stage has one rank" sweep --tp 1 --tp-protocol agree --csv "$tmp/sw.csv"
# --per-stage with the JSON on stdout printed nothing more: its table is left out there.
check "--per-stage: adds rows to the table, which --json - leaves out" simulate --pp 2 -m 2 --per-stage --json -
check "--per-stage: adds rows to the table, which --json - leaves out" run --pp 2 -m 2 --per-stage --json -
# sweep runs one chunk per stage and has no --vpp: the interleaved hints failed the first point
# with "needs --vpp 2 or more", naming a flag sweep does not take.
check "--hints: interleaved-1f1b needs 2 or more model chunks per stage, and sweep runs one (V = 1, it has no --vpp); use 1f1b" sweep --hints bf,interleaved-1f1b
check "--hints: bfs needs 2 or more model chunks per stage" sweep --hints bfs
check "--hints: zb-v needs 2 or more model chunks per stage" sweep --hints zb-v
check "--pp: 'abc' is not a whole number (rrfp simulate --help says what it takes)" simulate --pp abc
# A value its option's type cannot hold is named with the type (CLI11 said "Could not convert").
check "--pp: '1e3' is not a whole number (rrfp simulate --help says what it takes)" simulate --pp 1e3
# A command under another: its own flag's type and help (schedule's were looked up, which has
# no --pp: "not a value of its type (rrfp schedule --help ...)").
check "--pp: 'abc' is not a whole number (rrfp schedule show --help says what it takes)" schedule show --pp abc
check "--save-every: '99999999999' is too large a whole number (at most 2147483647)" train --save-every 99999999999
check "--limit: '-99999999999' is a whole number out of this flag's range (rrfp run --help" run --limit -99999999999
# A list flag's bad value alone: CLI11 named the values joined, "'3,99999999999' is not a whole
# number".
check "--limits: '99999999999' is too large a whole number (at most 2147483647)" sweep --limits 3 99999999999
check "--limits: '-5x' is not a whole number (rrfp sweep" sweep --limits 3 -5x 4
check "--budget: 'abc' is not a number" plan --budget abc
check "unknown jitter level" simulate --workload jitter:J7
check "--policy fixed: needs a list hint" simulate --hint bf --policy fixed
check "--tp: must be between 1 and 1024, got 0" simulate --tp 0
check "--tp: must be between 1 and 1024, got 2147483647" simulate --tp 2147483647
check "--tp: must be between 1 and 1024, got 1025" predict --tp 1025 x.json
check "--comm: expected auto, async or blocking, got 'smoke'" predict --comm smoke x.json
check "--tp: must be between 1 and 1024, got 2000" sweep --tp 2000
# Before any point: --tp 1,2000 ran every TP 1 point first (nothing on stdout here).
check "--tp: must be between 1 and 1024, got 2000" sweep --workloads language --pp 2 --tp 1,2000
[ -s "$tmp/out" ] && { echo "FAIL: sweep --tp 1,2000 ran points first"; fails=$((fails + 1)); }
check "--comm: unknown mode" simulate --comm smoke
# Outputs are checked before the work (a mistyped folder used to cost every run first).
check "--json: '$tmp/none/x.json': its folder '$tmp/none' does not exist" \
  simulate --pp 4 -m 8 --json "$tmp/none/x.json"
check "--out: '$tmp/none/h.json': its folder" plan --pp 2 -m 4 --out "$tmp/none/h.json"
check "--csv: '$tmp/none/s.csv': its folder" sweep --csv "$tmp/none/s.csv"
check "--svg: '$tmp' is a directory" run --pp 2 -m 4 --svg "$tmp"
check "--trace: '-' (stdout) is for --json only; give a file" simulate --pp 2 -m 2 --trace -
# Without --hint the default comparison runs both policies: a --policy there was ignored.
check "--policy: chooses how the --hint runs" simulate --policy nope
check "--policy: chooses how the --hint runs" run --policy fixed
check "--workload-file: '$tmp/missing.json' does not exist" simulate --workload-file "$tmp/missing.json"
printf '{"forward_us": -1}' >"$tmp/neg.json"
check "forward_us" simulate --workload-file "$tmp/neg.json"
printf '{"forward_us": 10' >"$tmp/trunc.json"
check "invalid JSON" simulate --workload-file "$tmp/trunc.json"
printf 'stage,chunk,microbatch,kind,duration_us\n0,0,0,F,x\n' >"$tmp/bad.csv"
check "is not a number" simulate --replay "$tmp/bad.csv" --hint 1f1b
printf 'stage 0: F0:0 B0:0 F0:1 B0:1\nstage 1: F1:1 B1:1 F1:0 B1:0\n' >"$tmp/cycle.txt"
check "can never finish" schedule check --pp 2 --microbatches 2 "$tmp/cycle.txt"
check "--comm: unknown mode" run --comm smoke
# run sleeps its tasks' durations: its wall time is predicted from the simulated step and
# refused above 10 minutes (50 s forwards slept for about 1000 s without a word).
printf '{"preset": "uniform", "forward_us": 5e7}' >"$tmp/slow.json"
check "run: about 1000 s of emulated steps (1 run of 500 s simulated, 2 steps each: --rounds x (--warmup + --repeat); up to 3000 s with --warmup-extra's 4 more); at most 600 s: shorten the durations of --workload-file '$tmp/slow.json', lower --pp, --vpp or --microbatches, or lower --rounds, --repeat or --warmup" \
  run --pp 2 -m 4 --hint 1f1b --policy fixed --workload-file "$tmp/slow.json"
# A task or message that lasts the watchdog's --timeout is refused before the run: its emulated
# sleep was reported as a stall after 60 s ("no progress ... running F c0 m0 for 60000 ms").
printf '{"forward_us": 7e7}' >"$tmp/f70.json"
check "run: task F c0 m0 lasts 70 s (the longest), not less than --timeout 60 s, which would take its emulated wait for a stall: raise --timeout (0: never) or shorten the durations of --workload-file '$tmp/f70.json'" \
  run --pp 1 -m 1 --workload uniform --workload-file "$tmp/f70.json" --hint 1f1b --policy fixed
printf '{"comm_latency_us": 2e6, "forward_us": 1000}' >"$tmp/m2.json"
check "run: the message of task F c0 m0 lasts 2 s (the longest), not less than --timeout 1 s" \
  run --pp 2 -m 1 --workload uniform --workload-file "$tmp/m2.json" --hint 1f1b --policy fixed --timeout 1
# A TP collective follows its task with no progress between: past --timeout with it, the run
# failed as a stall (exit 1) where it would finish. The limit as given, and as the watchdog
# counts it; the longest task named (the first was, and each retry named the next).
printf '{"preset": "uniform", "tp_collective_us": 200000}' >"$tmp/coll.json"
check "run: task (with its TP collective) F c0 m1 lasts 0.201 s (the longest), not less than --timeout 0.15 s" \
  run --pp 2 -m 2 --tp 2 --workload-file "$tmp/coll.json" --hint 1f1b --policy fixed --timeout 0.15
check "run: task B c0 m7 lasts 0.0875 s (the longest), not less than --timeout 0.01345 s (13 ms: the watchdog counts whole milliseconds)" \
  run --pp 4 -m 8 --hint 1f1b --policy fixed --timeout 0.01345
# The rendezvous baseline runs on the runtime too.
"$rrfp" run --comm blocking --pp 2 -m 4 --workload uniform --hint 1f1b --policy fixed >/dev/null || { echo "FAIL: run --comm blocking"; fails=$((fails + 1)); }
check "--timeout: must be between 0 and 86400 seconds, got -1" run --timeout -1
check "--timeout: must be between 0 and 86400 seconds, got inf" run --timeout inf
check "--transport mpi: " run --transport mpi --pp 2 -m 2  # not under mpirun (or no Open MPI)
check "--transport: unknown transport 'tcp'" run --transport tcp --pp 2 -m 2
check "--pp: must be at least 1" run --pp 0
check "--idle-spin-us: must be a whole number from 0 to 10000, got 10001" run --idle-spin-us 10001
check "unknown hint 'nope'" run --hint nope
check "--policy fixed: needs a list hint" run --hint bf --policy fixed
# Every input file is bounded in type and size before it is read (no hang, no unbounded memory).
mkfifo "$tmp/fifo"
check "--workload-file: '/dev/zero' is not a regular file" simulate --workload-file /dev/zero
check "--replay: '/dev/urandom' is not a regular file" simulate --replay /dev/urandom --hint 1f1b
check "FILE: '/dev/zero' is not a regular file" schedule check /dev/zero
check "--workload-file: '$tmp/fifo' is not a regular file" simulate --workload-file "$tmp/fifo"
check "--workload-file: '$tmp' is a directory" simulate --workload-file "$tmp"
check "--replay: '$tmp/nope.csv' does not exist" simulate --replay "$tmp/nope.csv" --hint 1f1b
truncate -s 3M "$tmp/big.json"
check "has 3.0 MiB; at most 1.0 MiB is read for --workload-file" simulate --workload-file "$tmp/big.json"
# Just past the cap, in bytes: "has 1.0 MiB; at most 1.0 MiB" said nothing.
truncate -s 1048600 "$tmp/big.json"
check "has 1048600 bytes; at most 1048576 bytes is read for --workload-file" simulate --workload-file "$tmp/big.json"
head -c 60000 /dev/zero | tr '\0' '[' >"$tmp/deep.json"
check "nested deeper than 64 levels" simulate --workload-file "$tmp/deep.json"
{ printf '{"format": "rrfp-hint", "stages": '; head -c 100000 /dev/zero | tr '\0' '[' | fold -w 1000; } >"$tmp/deep-hint.json"
check "nested deeper than 64 levels" schedule check "$tmp/deep-hint.json"
{ echo "stage,chunk,microbatch,kind,duration_us"; head -c 9000 /dev/zero | tr '\0' '1'; echo; } >"$tmp/long.csv"
check "line 2 has 8.8 KiB; lines may have at most 4.0 KiB" simulate --replay "$tmp/long.csv" --hint 1f1b
# Numbers: ranges and finiteness, checked before any work.
printf '{"forward_us": 1e15}' >"$tmp/w1.json"
check "workload forward_us: must be a finite number in [0, 1e+09], got 1e+15" simulate --workload-file "$tmp/w1.json"
printf '{"tokens_max": 1e300}' >"$tmp/w2.json"
check "workload tokens_max: must be a finite number in [256, 1e+09]" simulate --workload-file "$tmp/w2.json"
printf '{"forward_us": 1e8, "head_factor": 100, "backward_ratio_max": 100}' >"$tmp/w3.json"
check "draws a compute time past the 1e+09 us (1000 s) a task may take" simulate --workload-file "$tmp/w3.json"
# A bandwidth too low for the messages names what to raise (it said to lower the times).
printf '{"comm_bandwidth_gbps": 0.00001}' >"$tmp/w5.json"
check "(1000 s): raise comm_bandwidth_gbps, or lower comm_latency_us, comm_sigma, comm_slow_us or bytes_per_token" simulate --workload-file "$tmp/w5.json"
printf 'stage,chunk,microbatch,kind,duration_us\n0,0,0,F,1e13\n' >"$tmp/huge.csv"
check "column duration_us: a task or message of 1e+13 us" simulate --replay "$tmp/huge.csv" --hint 1f1b --pp 1 -m 1
check "--seed: must not be negative, got -1" simulate --seed -1
check "--seed: must be a whole number from 0 to 18446744073709551615, got 18446744073709551616" simulate --seed 18446744073709551616
check "--seed: must be a whole number from 0 to 18446744073709551615, got 1e23" simulate --seed 1e23
printf '{"preset": "uniform", "forward_us": 1e9}' >"$tmp/w4.json"
check "tasks add up to 317.098 years; a step may hold at most 146" simulate --workload-file "$tmp/w4.json" --pp 1 -m 5000000 --hint 1f1b --policy fixed
# Each field within its range, a drawn task may still pass the bound: named by the task and the
# fields it is drawn from (it said "workload: a task or message of 1037891386.25 us"). A
# forward_us that rounds every task to 0 ns (alone, or in each TP rank's share) ran a step of
# messages alone, silently.
printf '{"forward_us": 1e9}' >"$tmp/w6.json"
check "workload: F c0 m0 draws a compute time past the 1e+09 us (1000 s) a task may take: lower forward_us or image_us" simulate --workload-file "$tmp/w6.json" --pp 4 -m 8 --hint bf --policy ready
printf '{"preset": "uniform", "forward_us": 0.0001}' >"$tmp/w7.json"
check "workload forward_us: 0.0001 us draws every task as 0 ns (times are counted in whole nanoseconds): raise forward_us" simulate --workload-file "$tmp/w7.json"
printf '{"preset": "uniform", "forward_us": 0.001}' >"$tmp/w8.json"
check "draws every task as 0 ns (times are counted in whole nanoseconds, and each of the TP ranks takes its share of a task)" simulate --workload-file "$tmp/w8.json" --tp 4
printf '{"preset": "jitter:J3", "jitter_floor_us": 1e9}' >"$tmp/w9.json"
check "or the jitter's (jitter_floor_us, jitter_alpha)" simulate --workload-file "$tmp/w9.json" --pp 4 -m 8 --hint bf --policy ready
# rrfp plan: bad budgets and modes (its round trip: cli_round_trips.sh).
check "--budget: must be in (0, 86400]" plan --budget 0
check "--exact-budget: must be in (0, 86400] seconds, got nan" plan --exact-budget nan
check "--budget: must be in (0, 86400] seconds, got nan" plan --budget nan
check "--exact: expected auto, on or off" plan --exact maybe
check "--exact on: enumerates every order" plan --pp 2 -m 2 --entry in-order --exact on
check "--entry: expected free or in-order" plan --entry sorted
check "--exact on: needs --tp 1" plan --pp 2 -m 2 --tp 2 --exact on
# A level of its search a task: 48,000 overflowed the stack (SIGSEGV after 107 s).
check "--exact on: takes at most 2048 tasks (its search goes a level deeper a task); this step has 2052" plan --pp 2 -m 513 --exact on
check "--exact-nodes: must not be negative, got -1" plan --exact-nodes -1
check "--limit: must be 0 (default) or at least 1, got -2" plan --limit -2
# Past 64 bits, or past what a day's search visits, numbers were clamped to their type's largest.
check "--search-seed: must be a whole number from 0 to 18446744073709551615, got 18446744073709551616" plan --search-seed 18446744073709551616
check "--search-seed: must be a whole number from 0 to 18446744073709551615, got 99999999999999999999999" plan --search-seed 99999999999999999999999
check "--max-evaluations: must be a whole number from 0 to 1000000000000, got 99999999999999999999" plan --max-evaluations 99999999999999999999
check "--exact-nodes: '0x10' is not a whole number in decimal digits (hexadecimal is not read" plan --exact-nodes 0x10
check "--tp-protocol: unknown protocol 'nope' (expected leader, agree or none)" simulate --tp 2 --tp-protocol nope
check "--compare: simulates each run, and a simulation under --tp-protocol none fails" run --tp 2 --tp-protocol none --compare
# At TP=1 a stage has one rank and nothing to coordinate: the protocol was taken and ignored
# (by simulate, run, plan and train); refused as such, before --compare's own refusal.
for cmd in simulate run plan; do
  check "--tp-protocol: how the tensor-parallel ranks of a stage coordinate; at --tp 1 a stage has one rank" $cmd --pp 2 -m 4 --workload uniform --tp-protocol agree
done
check "--tp-protocol: how the tensor-parallel ranks of a stage coordinate; at --tp 1" run --pp 2 -m 4 --workload uniform --tp-protocol none --compare
# A workload of zero durations simulates to steps of 0 ns: its simulated speedups and errors are
# "-" in the table and null in the JSON (they printed "-nanx"). A replayed step of microseconds
# prints to the nanosecond, as the run's table prints one (it read 0.00 beside an error of
# +4291.3%).
echo '{"preset": "uniform", "forward_us": 0, "comm_latency_us": 0}' >"$tmp/zero.json"
"$rrfp" run --pp 2 -m 4 --workload-file "$tmp/zero.json" --compare --json "$tmp/zero.out.json" \
  >"$tmp/zero.txt" 2>&1 && ! grep -qi nan "$tmp/zero.txt" &&
  grep -qE "^ready bf \(async\) .*[0-9]x +- +-$" "$tmp/zero.txt" &&
  awk '/^ready bf \(async\)/ && NF >= 10 { r = $7 }
       END { exit !(r ~ /^0\.[0-9][0-9][0-9][0-9][0-9][0-9]$/ || r + 0 >= 1) }' "$tmp/zero.txt" &&
  /usr/bin/python3 -c 'import json, sys
runs = json.load(open(sys.argv[1]))["compare"]["runs"]
assert runs and all(r["error"] is None for r in runs), runs' "$tmp/zero.out.json" ||
  { echo "FAIL: run --compare of zero durations"; cat "$tmp/zero.txt"; fails=$((fails + 1)); }
# A JSON hint's "format" of another type is named (nlohmann's "type must be string, but is
# number"); a header's number with a leading zero is that number ("written for
# microbatches=03 but the run has microbatches=3").
printf '{"format": 5, "version": 1}' >"$tmp/format5.json"
check 'format5.json: "format" is 5; an rrfp hint'"'"'s is "rrfp-hint"' schedule check "$tmp/format5.json"
printf 'rrfp-hint 1 pp=2 microbatches=02\nstage 0: F0:0 F0:1 B0:0 B0:1\nstage 1: F1:0 B1:0 F1:1 B1:1\n' >"$tmp/zero.txt"
"$rrfp" simulate --pp 2 -m 2 --hint "$tmp/zero.txt" >/dev/null 2>&1 ||
  { echo "FAIL: a hint header's microbatches=02 against -m 2"; fails=$((fails + 1)); }
# A flag given twice (after a shared set of flags, say) is named, in words (CLI11 said "At Most
# 1 required but received 2").
check "--pp: given 2 times; it takes one value, so give it once" simulate --pp 2 --pp 3
# How to read a replayed trace, without one: taken and ignored, it is refused.
check "--step requires --replay" simulate --pp 2 -m 4 --step 1
check "--message-us requires --replay" simulate --pp 2 -m 4 --message-us 5
# rrfp calibrate: bad sizes and transports name the flag; a tiny in-process calibration writes
# a workload file that simulate reads back. (In one process two transfers at once differ from
# one by thread wake-ups alone, so the links' capacity may come out anywhere from 0 to 2.)
check "--sizes: '12Q' is not a size from 1 to 1024M" calibrate --sizes 8,12Q
check "--sizes: '0' is not a size" calibrate --sizes 0
# A value quoted shortened says so (its first 20 bytes read as another value, typed).
check "--sizes: '12345678901234567890...' is not a size" calibrate --sizes 123456789012345678901K
check "--transport: unknown transport 'tcp'" calibrate --transport tcp
check "--endpoints: expected 2 (one pair) or 4 (a second pair transferring at once), got 1" calibrate --endpoints 1
# Named before the memory it would take, which blamed --sizes.
check "--endpoints: expected 2 (one pair) or 4 (a second pair transferring at once), got 300" calibrate --endpoints 300
# 3 measured what 2 does, 5 to 64 what 4 does, the others idle.
check "--endpoints: expected 2 (one pair) or 4 (a second pair transferring at once), got 3" calibrate --endpoints 3
check "--endpoints: expected 2 (one pair) or 4 (a second pair transferring at once), got 8" calibrate --endpoints 8
check "--seconds: must be a number in [0.1, 3600], got nan" calibrate --seconds nan --sizes 8
check "--seconds: must be a number in [0.1, 3600], got 0.05" calibrate --seconds 0.05 --sizes 8
check "--pp: must be a whole number from 1 to 4096, got 0" predict "$here/data/torch-pp2" --pp 0
# An empty item of predict's --hints is refused (bf,,bfw was taken as bf,bfw).
check "--hints: 'bf,,bfw' holds an empty item" predict "$here/data/torch-pp2" --hints bf,,bfw
check "--hints: 'bf,' holds an empty item" predict "$here/data/torch-pp2" --hints bf,
check "--microbatches: must be a whole number from 1 to 1048576, got 0" predict "$here/data/torch-pp2" -m 0
# The rules' TP coordination where there are no groups: taken and ignored, it read as applied.
check "--coord-us: the trace's stages have one rank each (TP 1: no group to coordinate); with --tp 2 or more" \
  predict "$here/data/torch-pp2" --coord-us 50
check "--tp-protocol: expected leader or agree, got 'none'" predict "$here/data/torch-pp2" --tp 2 --tp-protocol none
# Sizes are whole numbers in digits (0x10 measured 16 bytes, 1.9 one byte); --timeout is checked
# in-process too (-5 and nan ran) and refused there, as --endpoints is under mpi: neither applies.
check "--sizes: '0x10' is not a size from 1 to 1024M (a whole number of bytes" calibrate --sizes 0x10
check "--sizes: '1.9' is not a size from 1 to 1024M" calibrate --sizes 8,1.9
check "--sizes: '1.5K' is not a size" calibrate --sizes 1.5K
check "--timeout: must be between 0 and 86400 seconds, got -5" calibrate --timeout -5 --seconds 0.1 --sizes 8
check "--timeout: must be between 0 and 86400 seconds, got nan" calibrate --timeout nan --seconds 0.1 --sizes 8
check "--timeout: bounds how long an MPI job's processes wait for each other (--transport mpi); in one process" calibrate --timeout 5 --seconds 0.1 --sizes 8
check "--endpoints: the threads of an in-process calibration; under --transport mpi" calibrate --transport mpi --endpoints 8
check "--calibration: only with --transport mpi" run --pp 2 -m 2 --calibration x.json
check "--rendezvous: expected offer or pull, got 'eager'" run --pp 2 -m 2 --rendezvous eager
check "--rendezvous pull: only with --transport mpi" run --pp 2 -m 2 --rendezvous pull
# The default given is taken and ignored there too: refused alike.
check "--rendezvous offer: only with --transport mpi, where a blocking run's payload travels with its offer or waits to be pulled; in one process neither applies (the emulated latency runs from the acceptance): leave --rendezvous out" run --pp 2 -m 2 --rendezvous offer
# What only a real transport does, the threaded runtime cannot emulate: each such field is refused
# by name with its allowed value, and the run starts nothing.
for field in 'comm_links 2 0' 'comm_two_slowdown 1.5 1' 'comm_serial_receive true false' \
  'comm_offer_payload true false' 'comm_wake_us 30 0' 'comm_wake_per_copy_us 100 0' \
  'coord_latency_us 2000 10'; do
  set -- $field
  printf '{"%s": %s}' "$1" "$2" >"$tmp/transport.json"
  tp=1
  [ "$1" = coord_latency_us ] && tp=2  # a TP group's hop: of no use to one rank, nor refused
  check "--workload-file: $1 must be $3 with --transport inproc" \
    run --pp 2 -m 2 --tp $tp --workload-file "$tmp/transport.json"
done
printf '{"coord_latency_us": 2000}' >"$tmp/transport.json"
"$rrfp" run --pp 2 -m 2 --workload-file "$tmp/transport.json" >/dev/null 2>"$tmp/err" ||
  { echo "FAIL: run at --tp 1 refused a coord_latency_us it never uses: $(cat "$tmp/err")"; fails=$((fails + 1)); }
printf '{"comm_links": true}' >"$tmp/links.json"
check "field \"comm_links\": must be a number, got true" simulate --workload-file "$tmp/links.json"
printf '{"comm_links": 5000}' >"$tmp/links.json"
check "workload comm_links: must be a finite number in [0, 4096], got 5000" simulate --workload-file "$tmp/links.json"
printf '{"comm_links": 0.5}' >"$tmp/links.json"
check "workload comm_links: must be 0 (each message on its own) or in [1, 4096] (messages' worth of bandwidth), got 0.5" simulate --workload-file "$tmp/links.json"
# rrfp run --repeat (and --rounds): the measured time is the median of the timed steps, inside
# their range; with rounds, the runs take turns, each round announced.
# The fidelity table's labels are as wide as the longest: each header ends where its column's
# numbers end (a label of 30 characters pushed them two places right).
"$rrfp" run --pp 2 -m 4 --vpp 2 --workload uniform --hint interleaved-1f1b --compare \
  >"$tmp/wide.txt" 2>&1 &&
  awk '/^run .*measured_ms/ { end = index($0, "measured_ms") + 10; on = 1; next }
       on && /^fixed interleaved-1f1b \(async\)/ { n = split($0, c, ""); e = 0
         for (i = 31; i <= n && c[i] == " "; i++) {}
         for (; i <= n && c[i] != " "; i++) e = i
         ok = e == end; found = 1 }
       END { exit !(found && ok) }' "$tmp/wide.txt" ||
  { echo "FAIL: the fidelity table's columns do not line up under a long label:"
    cat "$tmp/wide.txt"; fails=$((fails + 1)); }
check "--repeat: must be a whole number from 1 to 1000, got 0" run --pp 2 -m 2 --repeat 0
check "--warmup: must be a whole number from 0 to 100, got -1" run --pp 2 -m 2 --warmup -1
check "--rounds: must be a whole number from 1 to 100, got 0" run --rounds 0
check "--rounds x --repeat: at most 1000 timed steps per run, got 1010" run --rounds 10 --repeat 101
for rounds in 1 3; do
  "$rrfp" run --pp 2 -m 4 --workload uniform --hint 1f1b --policy fixed --repeat 3 --compare \
    --rounds $rounds --json "$tmp/repeat.json" >"$tmp/repeat.txt" 2>"$tmp/repeat.err" &&
    awk 'BEGIN { ok = 1 }
         /measured_range_ms/ { on = 1; next }
         on && NF { split($NF, r, "-"); m = $(NF - 8); ok = ok && r[1] + 0 <= m + 0 && m + 0 <= r[2] + 0
                    found = 1 }
         END { exit !(found && ok) }' "$tmp/repeat.txt" ||
    { echo "FAIL: run --repeat 3 --rounds $rounds --compare: no range, or the median outside it:"
      cat "$tmp/repeat.txt"; fails=$((fails + 1)); }
  # --json carries the comparison: every timed step, the reported one their median, and the
  # errors of the simulation and the replay.
  /usr/bin/python3 - "$tmp/repeat.json" "$((3 * rounds))" <<'PY' ||
import json, statistics, sys
j = json.load(open(sys.argv[1]))
c = j["compare"]["runs"][0]
steps = c["measured_steps_ms"]
assert len(steps) == int(sys.argv[2]), steps
assert c["measured_ms"] == statistics.median_low(steps) == j["runs"][0]["makespan_ms"], c
assert abs(c["error"] - (c["measured_ms"] / c["simulated_ms"] - 1)) < 1e-12, c
assert abs(c["replayed_error"] - (c["measured_ms"] / c["replayed_ms"] - 1)) < 1e-12, c
assert "message_model" not in j["compare"]  # in one process: the workload's own
PY
    { echo "FAIL: run --compare --json: the comparison is missing or inconsistent:"
      cat "$tmp/repeat.json"; fails=$((fails + 1)); }
  want=$([ "$rounds" = 3 ] && echo 3 || echo 0)
  [ "$(grep -c "(round [123] of 3)" "$tmp/repeat.err")" = "$want" ] ||
    { echo "FAIL: run --rounds $rounds announces the wrong rounds:"; cat "$tmp/repeat.err"
      fails=$((fails + 1)); }
done
# Fresh payload buffers (page faults in a step's time): in one process every output buffer a
# step can hold at once is mapped before the first step (2 stages, at most 2 outputs of each
# kind out at once under fixed 1F1B, 32 MiB each: 256 MiB), so even without a warm-up no timed
# step maps one, and the default warm-up needs no step beyond its first.
check "--warmup-extra: must be a whole number from 0 to 100, got -1" run --pp 2 -m 2 --warmup-extra -1
for warmup in 0 1; do
  "$rrfp" run --pp 2 -m 4 --workload uniform --hint 1f1b --policy fixed --warmup $warmup \
    --compare --json "$tmp/fresh.json" >"$tmp/fresh.txt" 2>&1 &&
    /usr/bin/python3 - "$tmp/fresh.json" "$tmp/fresh.txt" "$warmup" <<'PY' ||
import json, sys
runs = json.load(open(sys.argv[1]))["compare"]["runs"]
text = open(sys.argv[2]).read()
fresh = [r["measured_steps_fresh_buffers"] for r in runs]
assert fresh == [[0]], fresh
# --warmup 0 has no step for --warmup-extra to follow, and the line offers none.
assert (f"warm-up: {sys.argv[3]} untimed steps per run (--warmup {sys.argv[3]}, then up to "
        "--warmup-extra 4" if sys.argv[3] != "0" else
        "warm-up: 0 untimed steps per run (--warmup 0); timed steps") in text, text
assert "(their page faults in their times): 0 of 1; output buffers mapped ahead (address " \
    "space, never written in one process but for a page each): 256 MiB, the largest run's" \
    in text, text
PY
    { echo "FAIL: run --warmup $warmup: fresh buffers misreported:"; cat "$tmp/fresh.txt"
      fails=$((fails + 1)); }
done
# Outputs that could hang the process: a FIFO with no reader is refused at once, by name, as is
# a directory; a FIFO that has a reader (a pipe the user asked for) is written. A report into a
# full disk is a failed run (exit 1), not a success with the output lost.
check "--json: '$tmp/fifo' is a FIFO with no reader" simulate --pp 2 -m 4 --json "$tmp/fifo"
check "--svg: '$tmp/fifo' is a FIFO with no reader" simulate --pp 2 -m 4 --svg "$tmp/fifo"
check "--trace: '$tmp/fifo' is a FIFO with no reader" simulate --pp 2 -m 4 --trace "$tmp/fifo"
check "--out: '$tmp/fifo' is a FIFO with no reader" plan --pp 2 -m 2 --max-evaluations 5 --out "$tmp/fifo"
check "--json: '$tmp' is a directory, not a file" simulate --pp 2 -m 4 --json "$tmp"
# Before the work, in one line: run emulated its steps first (its progress lines on stderr),
# and plan spent its whole budget, before the open found no reader; /proc took the check's
# access() as root, then no file at the end.
check "--json: '$tmp/fifo' is a FIFO with no reader" run --pp 2 -m 4 --workload uniform --json "$tmp/fifo"
check "--json: '/proc/rrfp-report.json': its folder '/proc' takes no new file" simulate --pp 2 -m 4 --json /proc/rrfp-report.json
"$rrfp" simulate --pp 2 -m 4 --json >(cat >"$tmp/piped.json") >/dev/null 2>&1 ||
  { echo "FAIL: --json into a pipe with a reader"; fails=$((fails + 1)); }
wait $!  # the reader: what it got is all in its file once it has ended
/usr/bin/python3 -c 'import json, sys; assert isinstance(json.load(open(sys.argv[1])), dict)' \
  "$tmp/piped.json" 2>/dev/null ||
  { echo "FAIL: --json into a pipe: the reader got no JSON object:"; head -c 200 "$tmp/piped.json"
    fails=$((fails + 1)); }
for args in "--json -" ""; do
  # shellcheck disable=SC2086
  "$rrfp" simulate --pp 2 -m 4 $args >/dev/full 2>"$tmp/full.err"
  rc=$?
  [ $rc -eq 1 ] && grep -q "writing standard output failed" "$tmp/full.err" ||
    { echo "FAIL: simulate $args into /dev/full -> rc=$rc"; cat "$tmp/full.err"; fails=$((fails + 1)); }
done
echo "cli bad-input checks: $fails failed"
[ "$fails" -eq 0 ]
