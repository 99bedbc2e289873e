#!/usr/bin/env bash
# Inputs read as written, or refused in one line (docs/reliability.md): each check says what was
# misread, taken and ignored, clobbered, hung or read before its size was checked.
# Usage: cli_inputs.sh PATH/TO/rrfp [ON|OFF: whether the build has LibTorch]
here=$(cd "$(dirname "$0")" && pwd)
source "$here/cli_check.sh"
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
cd "$tmp" || exit 1
header() { "$rrfp" "$@" 2>&1 | head -1; }
"$rrfp" simulate --pp 3 -m 6 --hint zb-h1 --policy fixed --workload uniform --trace zb.json \
  >/dev/null || fail "simulate --trace zb.json"
echo '{"preset":"uniform","forward_us":5000}' >wf.json

# Number flags are decimal: a leading 0 read octal (-m 010 ran M=8, 08 was refused), 0x hex.
[[ "$(header simulate --pp 2 -m 010 --hint 1f1b --policy fixed)" == *" M=10 "* ]] ||
  fail "-m 010 is not M=10"
[[ "$(header simulate --pp 2 -m 08 --hint 1f1b --policy fixed)" == *" M=8 "* ]] ||
  fail "-m 08 is not M=8"
check "--microbatches: '0x10' is not a whole number in decimal digits (hexadecimal is not read; rrfp simulate --help says what it takes)" \
  simulate --pp 2 -m 0x10
check "--pp: '0X2' is not a whole number in decimal digits" schedule show --pp 0X2
check "--seed: '0x10' is not a whole number in decimal digits" simulate --seed 0x10
check "--budget: '0x10' is not a number in decimal digits" plan --budget 0x10
check "--step: zb.json has no step 10" predict zb.json --step 010
# Digits only: the conversion skipped blanks and a '+' before them and refused them after
# ("--pp ' 4'" ran, "'4 '" was refused); a number past a double's range read as 0 or infinity
# (--clip 1e-400 trained as --clip 0, unclipped, and --timeout 1e-400 turned the watchdog off).
check "--pp: '+4' is not a whole number (blanks and a '+' are not read; rrfp simulate --help says" simulate --pp +4
check "--pp: ' 4' is not a whole number (blanks and a '+' are not read;" simulate --pp " 4"
check "--microbatches: '4 ' is not a whole number (blanks and a '+' are not read;" simulate -m "4 "
check "--seed: '+8' is not a whole number" simulate --seed +8
check "--budget: ' 1' is not a number (blanks and a '+' are not read; rrfp plan --help" plan --budget " 1"
check "--budget: '1e-400' is past a double's range, where it reads as 0 or infinity" plan --budget 1e-400
check "--budget: '1e400' is past a double's range" plan --budget 1e400
# A subnormal number is read with a range error too, but kept: it was refused as read as 0.
"$rrfp" plan --pp 2 -m 2 --budget 4e-320 --max-evaluations 5 >/dev/null 2>&1 || fail "plan --budget 4e-320"
check "--pp: '1e-400' is not a whole number (rrfp simulate --help says what it takes)" simulate --pp 1e-400
check "--idle-spin-us: must be a whole number from 0 to 10000, got abc" run --idle-spin-us abc

# A zb trace ends on W tasks: with the backward whole they fold into their B, and the measured
# step still ends at the last W (it read 12.00 ms of a 14.00 ms step).
auto=$("$rrfp" predict zb.json | grep '^measured step')
off=$("$rrfp" predict zb.json --split-backward off | grep '^measured step')
[ -n "$auto" ] && [ "$auto" = "$off" ] || fail "predict --split-backward off: '$off', auto: '$auto'"

# A workload file naming no preset of its own is named with the one it overrides: the header
# said "workload=b.json" alone, the same for the language and multimodal steps under it.
echo '{"bytes_per_token": 5}' >b.json
[[ "$(header simulate --pp 4 -m 8 --workload-file b.json --workload language)" == *"  workload=language + b.json  "* ]] &&
  [[ "$(header simulate --pp 4 -m 8 --workload-file b.json)" == *"  workload=multimodal + b.json  "* ]] &&
  [[ "$(header simulate --pp 4 -m 8 --workload-file wf.json)" == *"  workload=wf.json  "* ]] &&
  echo '{"jitter_p": 0.3}' >jit.json &&
  [[ "$(header simulate --pp 3 -m 6 --replay zb.json --workload-file jit.json)" == *"workload=replay:zb.json step 0 + jit.json  "* ]] ||
  fail "a workload file's name: $(header simulate --pp 4 -m 8 --workload-file b.json --workload language)"

# Workload integers are read as the JSON holds them: 2^64 - 1 wrapped to -1 (no straggler).
printf '{"preset":"uniform","straggler_stage":18446744073709551615}' >w.json
check 'w.json: field "straggler_stage": must be an integer from -2 to 1000000, got 18446744073709551615' \
  simulate --pp 4 -m 8 --workload-file w.json
printf '{"preset":"uniform","straggler_window":0}' >w0.json
check 'field "straggler_window": must be an integer from 1 to 1000000, got 0' \
  simulate --pp 4 -m 8 --workload-file w0.json
# More vision chunks than P x V were capped to them.
printf '{"preset":"multimodal","vision_chunks":5}' >v.json
check "workload vision_chunks: 5 for 4 chunks (P x V); a count from 0 to 4" \
  simulate --pp 2 --vpp 2 -m 4 --workload-file v.json --hint bf
# A --workload-file with --replay was taken and ignored, where --workload was refused.
check "--workload-file: with --replay (and --tp 1) only jitter applies" \
  simulate --pp 3 -m 6 --replay zb.json --hint zb-h1 --policy fixed --workload-file wf.json
# Nor a file that sets a jitter beside fields the replay ignores: a straggler, a message model.
printf '{"jitter_p":0.3,"comm_links":1,"straggler_stage":1}' >wj.json
check "'wj.json' also sets comm_links, straggler_stage, which the replay would ignore" \
  simulate --pp 3 -m 6 --replay zb.json --hint zb-h1 --policy fixed --workload-file wj.json
# A file of jitter fields that draws none (jitter_p 0) applied nothing.
printf '{"jitter_alpha":2}' >wa.json
check "'wa.json' draws no jitter (its jitter_p is 0)" \
  simulate --pp 3 -m 6 --replay zb.json --hint zb-h1 --policy fixed --workload-file wa.json
# --workload beside a jitter file: the preset given is judged, not the file's name.
printf '{"jitter_p":0.1}' >jf.json
"$rrfp" simulate --pp 3 -m 6 --replay zb.json --hint zb-h1 --policy fixed --workload jitter:J1 \
  --workload-file jf.json >/dev/null 2>&1 || fail "--workload jitter:J1 beside a jitter file refused"
# A replay CSV keeps its cells' inner blanks: "10 00" was read as 1000.
printf 'stage,chunk,microbatch,kind,duration_us\n0,0,0,F, 10 00\n0,0,0,B,1000 \n' >sp.csv
check "sp.csv:2: column duration_us: '10 00' is not a number" \
  simulate --replay sp.csv --pp 1 -m 1 --hint 1f1b --policy fixed --split-backward off
# One preset under two names ran twice in a sweep.
check "--workloads: 'jitter:j2' and 'jitter' are one preset (jitter:J2)" \
  sweep --pp 2 --mb-factors 1 --seeds 1 --workloads jitter,jitter:j2

# One file given to two outputs, or an output that is an input: all were reported written and
# only the last was there (predict t.json --json t.json replaced the trace).
check "--trace: 'o.json' is also given to --json; give each output a file of its own" \
  simulate --pp 2 -m 4 --json o.json --trace o.json
check "--svg: './o.json' is also given to --json" simulate --pp 2 -m 4 --json o.json --svg ./o.json
check "--json: 'p.json' is also given to --out" plan --pp 2 -m 3 --max-evaluations 5 --out p.json --json p.json
check "--md: 's' is also given to --csv" sweep --pp 2 --mb-factors 1 --seeds 1 --csv s --md s
[ -e o.json ] || [ -e p.json ] || [ -e s ] && fail "a refused output was written"
cp zb.json zb.keep && ln zb.json zb-link.json
check "--json: 'zb.json' is the input TRACE or inside it" predict zb.json --json zb.json
check "--json: 'zb-link.json' is the input TRACE or inside it" predict zb.json --json zb-link.json
cmp -s zb.json zb.keep || fail "predict replaced its input trace"
"$rrfp" schedule show --pp 2 -m 3 --out h.txt >/dev/null || fail "schedule show --out h.txt"
# Shown again, the file's shape stands for the flags not given (as under check): it was refused
# as written for pp=2 where the run had the default pp=4.
"$rrfp" schedule show --hint h.txt | grep -q "^hint file:h.txt: P=2 V=1 M=3$" ||
  fail "schedule show --hint of a file it wrote at --pp 2 -m 3"
# ...and so under simulate, run and train, which refused it at their defaults' shape.
[[ "$(header simulate --hint h.txt --policy fixed --workload uniform)" == "P=2 V=1 (loop) M=3 "* ]] ||
  fail "simulate --hint h.txt: $(header simulate --hint h.txt --policy fixed --workload uniform)"
[[ "$("$rrfp" run --hint h.txt --policy fixed --workload uniform 2>/dev/null | head -1)" == "P=2 V=1 (loop) M=3 "* ]] ||
  fail "run --hint h.txt"
check "h.txt:1: hint was written for pp=2 but the run has pp=3" simulate --hint h.txt --pp 3
if [ "$trains" = ON ]; then
  "$rrfp" train --hint ./h.txt --policy fixed --steps 1 --warmup 0 --d-model 16 --heads 2 --layers 2 \
    --max-seq 32 --max-len 32 --min-len 8 --eval-every 0 --out trained >train.log 2>&1 ||
    fail "train --hint h.txt: $(tail -1 train.log)"
  grep -q "^rrfp train: P=2 V=1 (loop) M=3 fixed ./h.txt," train.log || fail "train --hint h.txt: $(head -1 train.log)"
fi
check "--trace: 'h.txt' is the input --hint or inside it" simulate --pp 2 -m 3 --hint h.txt --trace h.txt
check "--json: 'wf.json' is the input --workload-file or inside it" simulate --pp 2 -m 3 --workload-file wf.json --json wf.json
# A trace folder (one file per rank) is read whole: an output inside it replaced a rank's file.
mkdir tdir && cp zb.json tdir/t.json
check "--json: 'tdir/t.json' is the input TRACE or inside it" predict tdir --json tdir/t.json
check "--json: 'tdir/new.json' is the input TRACE or inside it" predict tdir --json tdir/new.json
cmp -s tdir/t.json zb.keep && [ ! -e tdir/new.json ] || fail "predict wrote inside its input folder"
# A link whose target is not there yet lands where the other output does.
ln -s o2.json lnk
check "--trace: 'o2.json' is also given to --json" simulate --pp 2 -m 4 --json lnk --trace o2.json
"$rrfp" simulate --pp 2 -m 4 --json /dev/null --trace /dev/null >/dev/null ||
  fail "two outputs to /dev/null (a device, no file) were refused"
# A working folder whose absolute path is past PATH_MAX, where absolute() and canonical() fail:
# the checks compared the names as typed (the SVG replaced the JSON, predict wrote inside its
# trace folder).
long=$(printf 'd%.0s' $(seq 200))
for _ in $(seq 22); do mkdir "$long" && cd "$long" || exit 1; done
cp "$tmp/zb.json" . && mkdir td && cp zb.json td/t.json
check "--svg: './same.json' is also given to --json" simulate --pp 2 -m 4 --json same.json --svg ./same.json
check "--json: 'td/p.json' is the input TRACE or inside it" predict td --json td/p.json
[ -e same.json ] || [ -e td/p.json ] && fail "a refused output was written past PATH_MAX"
cd "$tmp" || exit 1

# A FIFO as --hint hung in open() (and train ignored the first SIGTERM there): refused at once.
mkfifo fifo.txt
for c in "simulate --pp 2 -m 2 --hint fifo.txt" "schedule show --hint fifo.txt" \
         "schedule check fifo.txt" "run --pp 2 -m 2 --hint fifo.txt"; do
  # shellcheck disable=SC2086
  timeout -k 5 10 "$rrfp" $c >/dev/null 2>e.txt; rc=$?
  [ "$rc" -eq 2 ] && grep -q "'fifo.txt' is not a regular file" e.txt || fail "rrfp $c: rc=$rc $(cat e.txt)"
done
if [ "$trains" = ON ]; then
  timeout -k 5 10 "$rrfp" train --hint fifo.txt --steps 1 --out t >/dev/null 2>e.txt; rc=$?
  [ "$rc" -eq 2 ] && grep -q "'fifo.txt' is not a regular file" e.txt || fail "train --hint FIFO: rc=$rc"
fi
# The split a hint declares is found wherever it is: after 64 KiB of comments it was not, and
# the hint was refused for a split the user never chose.
"$rrfp" schedule show --pp 2 -m 3 --hint zb-h1 --out z.txt >/dev/null || fail "schedule show z.txt"
{ for i in $(seq 1 1300); do echo "# comment line $i padding padding padding padding padding"; done
  cat z.txt; } >late.txt
"$rrfp" schedule check --pp 2 -m 3 late.txt 2>&1 | grep -q "(split backward)" ||
  fail "a split header after 64 KiB of comments: $("$rrfp" schedule check --pp 2 -m 3 late.txt 2>&1)"

# A hint file's leading byte order mark is skipped, as --workload-file's is: a text hint was
# refused echoing it unseen, and a JSON one went to the text parser. Bytes echoed from a hint
# are visible: a NUL cut the message there. A file of fewer stages than the run's names --pp.
"$rrfp" schedule show --pp 2 -m 3 --hint zb-h1 --out zj.json >/dev/null || fail "schedule show zj.json"
for f in z.txt zj.json; do
  { printf '\xef\xbb\xbf'; cat "$f"; } >"bom-$f"
  "$rrfp" schedule check --pp 2 -m 3 "bom-$f" 2>&1 | grep -q "^ok: .*(split backward)" ||
    fail "a hint with a byte order mark: $("$rrfp" schedule check --pp 2 -m 3 "bom-$f" 2>&1)"
done
printf 'stage 0: F0:0 F0:1 F0:2 B0:0 B0:1\0 B0:2\nstage 1: F1:0 B1:0 F1:1 B1:1 F1:2 B1:2\n' >nul.txt
check "nul.txt:1: bad task token 'B0:1\\x00'" schedule check --pp 2 -m 3 --split-backward off nul.txt
grep -v '^rrfp-hint' h.txt >two.txt
check "two.txt: stage 2 has no line (the run has --pp 4 stages, 0..3)" schedule check -m 3 two.txt
# The file's V with the placement given was refused as "--placement vshape: needs --vpp 2, got
# --vpp 1", a V not given.
check "h.txt: written for vpp 1, but the placement given, vshape, needs vpp 2" \
  schedule check --placement vshape h.txt

# A path that is not UTF-8 reaches the JSON reports: they are written (nlohmann's strict dump
# threw "internal error" after all the work).
h=$(printf 'h\xff.txt')
cp h.txt "$h"
"$rrfp" simulate --pp 2 -m 3 --hint "./$h" --policy fixed --trace x.json --json x2.json >/dev/null ||
  fail "simulate with a non-UTF-8 hint path and --trace/--json"
/usr/bin/python3 -c 'import json, sys; [json.load(open(p)) for p in sys.argv[1:]]' x.json x2.json ||
  fail "the reports of a non-UTF-8 path are not JSON"

# A size is checked before a trace is read at it: --replay without --step read the trace at the
# flags' shape first (868 MB under a 300 MB limit), and predict had no estimate at all.
(
  export RRFP_MEMORY_LIMIT=300M
  ulimit -v 600000  # past it the read came first: out of memory, exit 1
  fails=0
  check "simulate: 3 runs of up to 18.0M tasks: about 958 MB of memory" \
    simulate --pp 3000 -m 3000 --split-backward off --replay zb.json
  check "run: 2 runs of up to 18.0M tasks" run --pp 3000 -m 3000 --split-backward off --hint bf --replay zb.json
  check "predict: 49.2M tasks at P=4096 V=1 M=6000 TP=1: about 19.7 GB of memory" \
    predict zb.json --pp 4096 -m 6000 --split-backward off
  exit "$fails"
) || fails=$((fails + $?))

# A folder's traces in one order whatever the order it lists them in: names alike but for
# leading zeros (r1, r01) compared equal and kept it, so the step replayed depended on which
# file was made first.
"$rrfp" simulate --pp 3 -m 6 --hint bf --policy ready --seed 2 --trace zb2.json >/dev/null ||
  fail "simulate --trace zb2.json"
# The tie goes to byte order, r01 first: its step is the one replayed.
measured() { "$rrfp" predict "$1" | grep '^measured step'; }
mkdir ab ba && cp zb.json ab/r1.json && cp zb2.json ab/r01.json &&
  cp zb2.json ba/r01.json && cp zb.json ba/r1.json
[ "$(measured ab)" = "$(measured zb2.json)" ] && [ "$(measured ba)" = "$(measured zb2.json)" ] ||
  fail "predict of one folder's files made in two orders: $(measured ab) / $(measured ba)"
# Options taken and ignored where nothing used them.
printf '{"preset":"uniform"}' >pre.json
check "--workload-file: 'pre.json' names a preset of its own ('uniform'), which replaces --workload language; give one of them" \
  simulate --pp 2 -m 4 --workload language --workload-file pre.json
"$rrfp" simulate --pp 2 -m 4 --workload uniform --workload-file pre.json >/dev/null 2>&1 ||
  fail "a file naming the preset given beside it was refused"
check "the trace times every message (" \
  simulate --pp 3 -m 6 --replay zb.json --hint zb-h1 --policy fixed --message-us 5
printf 'stage,chunk,microbatch,kind,duration_us\n0,0,0,F,1000\n0,0,0,B,1000\n' >ok.csv
check "--trace-format megatron: maps a trace's events to tasks; 'ok.csv' is a CSV" \
  simulate --replay ok.csv --pp 1 -m 1 --hint 1f1b --policy fixed --split-backward off \
  --trace-format megatron
check "--exact-nodes: tune(s) the exact search, which --exact off leaves out" \
  plan --pp 2 -m 2 --max-evaluations 5 --exact off --exact-nodes 5
check "--exact-budget: tune(s) the exact search, which --exact auto runs only up to P 4, V 2 and M 8" \
  plan --pp 5 -m 5 --max-evaluations 5 --exact-budget 5
check "--calibration: the message model --compare simulates with; give --compare too" \
  run --transport mpi --pp 2 -m 2 --calibration cal.json
check "--rendezvous pull: how blocking runs move their payloads; none of these runs blocks" \
  run --transport mpi --pp 2 -m 2 --comm async --rendezvous pull
# ... nor with a --hint, whose runs are async unless --comm says otherwise (it was taken).
check "--rendezvous pull: how blocking runs move their payloads; none of these runs blocks" \
  run --transport mpi --pp 2 -m 2 --hint 1f1b --rendezvous pull
check "--warmup-extra: more untimed steps after --warmup's, in place of those that still mapped" \
  run --pp 2 -m 2 --warmup 0 --warmup-extra 3
# The remedy only where it works: --exact on refuses TP 2 too.
check "--exact-nodes: tune(s) the exact search, which does not run here (needs --tp 1); leave it out" \
  plan --pp 2 -m 2 --tp 2 --max-evaluations 5 --exact-nodes 5
# Messages that said what is not so: the command's --policy takes both; a hint header's pp=x
# was told the run has pp=4 (the default); a JSON hint without stages gave the library's words.
check "--policy: unknown policy 'foo' (expected fixed, ready or both)" simulate --hint bf --policy foo
# "rrfp" was taken as ready by every command without a word in the help.
check "--policy: unknown policy 'rrfp' (expected fixed, ready or both)" simulate --hint bf --policy rrfp
printf 'rrfp-hint 1 pp=x vpp=1 microbatches=2 placement=loop split=0\nstage 0: F0:0 B0:0\n' >px.txt
check "px.txt:1: header field pp=x is not a whole number" schedule check px.txt --pp 2 -m 2
printf 'rrfp-hint 1 pp=2 vpp=1 microbatches=0 placement=loop split=0\nstage 0: F0:0 B0:0\n' >p0.txt
check "p0.txt:1: header field microbatches=0 is not a whole number from 1 to 50000000" \
  schedule check p0.txt --pp 2 -m 2
# The split is the header field whose flag has another name: "split=0" named no flag.
printf 'rrfp-hint 1 pp=2 vpp=1 microbatches=2 placement=loop split=1\nstage 0: F0:0 B0:0 W0:0\n' >s1.txt
check "s1.txt:1: hint was written for split=1 but the run has split=0 (--split-backward off)" \
  schedule check s1.txt --pp 2 -m 2 --split-backward off
# split takes 0 or 1: "split=2" was told the run has split=0; a signed stage number was read
# as the stage ("stage +1:" as stage 1).
printf 'rrfp-hint 1 pp=2 vpp=1 microbatches=2 placement=loop split=2\nstage 0: F0:0 B0:0\n' >s2.txt
check "s2.txt:1: header field split=2 is not 0 or 1" schedule check s2.txt --pp 2 -m 2
# A field given twice was taken.
printf 'rrfp-hint 1 pp=2 pp=2 vpp=1 microbatches=2 placement=loop split=0\nstage 0: F0:0 B0:0\n' >s3.txt
check "s3.txt:1: header field pp is given twice" schedule check s3.txt --pp 2 -m 2
# Without the shape flags, the file's last pp was taken as the run's and its first refused as
# another run's ("written for pp=1 but the run has pp=2").
# Said at the header's line, as the parser says it (the line was not named).
printf '\n# a comment\nrrfp-hint 1 pp=1 pp=2 vpp=1 microbatches=2 placement=loop split=0\nstage 0: F0:0 B0:0\n' >s4.txt
check "s4.txt:3: header field pp is given twice" schedule check s4.txt
# A placement that is none was told the run has placement=loop; a shape of the file's too large
# was said in flags not given (--pp x --vpp x --microbatches).
printf 'rrfp-hint 1 pp=1 vpp=1 microbatches=2 placement=zigzag split=0\nstage 0: F0:0 B0:0\n' >pz.txt
check "pz.txt:1: header field placement=zigzag is not loop or vshape" schedule check pz.txt
printf '{"format":"rrfp-hint","version":1,"pp":1,"placement":3}' >pz.json
check "pz.json: \"placement\" must be \"loop\" or \"vshape\", got 3" schedule check pz.json -m 2
printf 'rrfp-hint 1 pp=100000 vpp=100000 microbatches=100000 placement=loop split=0\nstage 0: F0:0\n' >big.txt
check "big.txt: written for pp x vpp x microbatches = 100000 x 100000 x 100000 = 1000000000000000 (with the shape given), past the 50000000 chunk-microbatches a step may have" \
  schedule check big.txt
printf 'rrfp-hint 1 pp=2 vpp=1 microbatches=1 placement=loop split=0\nstage 0: F0:0 B0:0\nstage +1: F1:0 B1:0\n' >sp.txt
check "sp.txt:3: stage '+1' out of range 0..1" schedule check sp.txt --pp 2 -m 1
printf '{"format":"rrfp-hint","version":1,"pp":2,"split_backward":true}' >s1.json
check "s1.json: hint was written for split_backward=true but the run has split_backward=false (--split-backward off)" \
  schedule check s1.json --pp 2 -m 2 --split-backward off
printf '{"format":"rrfp-hint","version":1,"pp":"2"}' >ns.json
check "ns.json: \"pp\" must be a whole number from 1 to 50000000, got \"2\"" schedule check ns.json --pp 2 -m 2
# Nor a number that is no shape: 2.5 was told the run has pp=2.
for bad in 2.5:2.5 0:0 -2:-2 1e20:1e+20; do
  printf '{"format":"rrfp-hint","version":1,"pp":2,"microbatches":%s}' "${bad%%:*}" >nb.json
  check "nb.json: \"microbatches\" must be a whole number from 1 to 50000000, got ${bad#*:}" \
    schedule check nb.json --pp 2 -m 2
done
# The file's vshape with its vpp 1 named --placement and --vpp, flags not given.
printf '{"format":"rrfp-hint","version":1,"pp":2,"vpp":1,"microbatches":2,"placement":"vshape"}' >vs.json
check "vs.json: written for placement vshape, which needs vpp 2, but the run has vpp 1 (the file's" \
  schedule check vs.json
printf '{"format":"rrfp-hint","version":1,"pp":2,"vpp":1,"microbatches":2}' >ns2.json
check "ns2.json: no \"stages\" (each stage's order of tasks)" schedule check ns2.json --pp 2 -m 2
"$rrfp" plan --pp 5 -m 5 --tp 2 --max-evaluations 5 --exact-budget 5 2>&1 | grep -q "exact on" &&
  fail "plan offered --exact on where it refuses TP 2"
RRFP_MEMORY_LIMIT=1M check "--sizes: about 403 MB of memory for 4 endpoint(s) in this process; RRFP_MEMORY_LIMIT allows 1 MB" \
  calibrate --sizes 32M --seconds 4
# --json to standard output however named: the JSON alone there (plan printed its text first).
json=$("$rrfp" plan --pp 2 -m 2 --max-evaluations 5 --json /dev/stdout 2>/dev/null)
[[ "$json" == "{"* ]] || fail "plan --json /dev/stdout: stdout starts '${json:0:20}'"
# A hint file too small for the shape it runs at is refused before the run is sized: a 73-byte
# file of 30M microbatches printed the estimate of 14 GB, then built 1.4 GB of model to refuse.
printf 'rrfp-hint 1 pp=1 vpp=1 microbatches=30000000 placement=loop split=1\nstage 0: F0:0\n' >m30.txt
check "FILE: 'm30.txt' (82 bytes) cannot list the 90000000 tasks of P=1 V=1 M=30000000, 4 bytes a task at least" \
  schedule check m30.txt
check "--hint: 'm30.txt' (82 bytes) cannot list the 90000000 tasks of P=1 V=1 M=30000000" \
  simulate --pp 1 -m 30000000 --hint m30.txt --policy fixed
# A shape the file's header gave is too large in the header's words (it named --pp and
# --microbatches, flags not given).
/usr/bin/python3 -c "
n = 20000
rows = [' '.join(f'F{s}:{i} B{s}:{i}' for i in range(n)) for s in (0, 1)]
open('h20k.txt', 'w').write(f'rrfp-hint 1 pp=2 vpp=1 microbatches={n} placement=loop split=0\\n'
                            + ''.join(f'stage {s}: {r}\\n' for s, r in enumerate(rows)))"
RRFP_MEMORY_LIMIT=2M check "RRFP_MEMORY_LIMIT allows 2 MB: lower the shape, which 'h20k.txt' was written for (a hint of fewer stages or microbatches)" \
  schedule check h20k.txt
RRFP_MEMORY_LIMIT=2M check "RRFP_MEMORY_LIMIT allows 2 MB: lower --pp or --microbatches" \
  schedule check h20k.txt --pp 2
# A built-in hint's name runs the built-in where a file of the name is here too: said.
touch gpipe
said=$("$rrfp" simulate --pp 2 -m 2 --hint gpipe --policy fixed 2>&1 >/dev/null)
[ "$said" = "rrfp: warning: --hint gpipe runs the built-in hint, not the file 'gpipe' here (give ./gpipe to run the file)" ] ||
  fail "a file named gpipe beside --hint gpipe: '$said'"
rm gpipe
mkdir gpipe  # a folder of the name (an output folder) is no hint: nothing said
said=$("$rrfp" simulate --pp 2 -m 2 --hint gpipe --policy fixed 2>&1 >/dev/null)
[ -z "$said" ] || fail "a folder named gpipe beside --hint gpipe: '$said'"
rmdir gpipe
# --spin with more ranks than cores: every task lasted longer than its duration, unsaid.
if command -v taskset >/dev/null; then
  cpu=$(taskset -pc $$ | sed 's/.*: //; s/[,-].*//')  # the first this shell may run on
  spun=$(taskset -c "$cpu" "$rrfp" run --pp 2 -m 2 --workload uniform --spin --hint 1f1b \
    --policy fixed 2>&1 >/dev/null)
  grep -q "^rrfp run: warning: --spin: 2 ranks busy-wait on 1 core: they take turns," <<<"$spun" ||
    fail "--spin on one core: '$spun'"
  spun=$(taskset -c "$cpu" "$rrfp" run --pp 1 -m 2 --workload uniform --spin --hint 1f1b \
    --policy fixed 2>&1 >/dev/null)
  grep -q "warning: --spin" <<<"$spun" && fail "--spin of one rank on one core warned: '$spun'"
  # --idle-spin-us likewise: an idle rank's spin took the core of one with work, unsaid.
  spun=$(taskset -c "$cpu" "$rrfp" run --pp 2 -m 2 --workload uniform --idle-spin-us 100 \
    --hint 1f1b --policy fixed 2>&1 >/dev/null)
  grep -q "^rrfp run: warning: --idle-spin-us: 2 ranks busy-wait on 1 core while idle" \
    <<<"$spun" || fail "--idle-spin-us on one core: '$spun'"
fi
echo "cli inputs checks: $fails failed"
[ "$fails" -eq 0 ]
