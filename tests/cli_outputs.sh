#!/usr/bin/env bash
# What rrfp writes: an output is whole or not there, a failed write keeps what was there, and
# every output flag takes '-' as simulate's do (stdout for --json, refused elsewhere).
# Usage: cli_outputs.sh PATH/TO/rrfp
here=$(cd "$(dirname "$0")" && pwd)
source "$here/cli_check.sh"
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
cd "$tmp" || exit 1

# A write that fails (here past a file size limit, as a full disk would) leaves the earlier
# output as it was, and no temporary: it was truncated in place, leaving 4096 bytes of cut JSON.
# SIGXFSZ keeps its default action here, as in a shell: rrfp ignores it itself (it was killed,
# exit 153 without a word, its hidden temporary left behind).
for flag in --json --svg; do
  "$rrfp" simulate --pp 4 -m 8 $flag keep >/dev/null || fail "simulate $flag keep"
  cp keep keep.before
  (ulimit -f 4; "$rrfp" simulate --pp 4 -m 8 --workload uniform $flag keep >/dev/null 2>err)
  rc=$?
  [ "$rc" -eq 1 ] && grep -q "writing failed: File too large" err ||
    fail "$flag past a size limit: exit $rc, $(cat err)"
  cmp -s keep keep.before || fail "$flag: a failed write changed the earlier output"
  ls -A | grep -q '^\.rrfp-' && fail "$flag: a failed write left its temporary"
done
# A file whose folder takes no new file is written in place; past a size limit (as on a full
# disk) it is left as it was: it was truncated first and left cut short. As root, the folder's
# permissions hold for another user only, whom setpriv makes.
as_user=()
[ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null &&
  as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
if [ "$(id -u)" -ne 0 ] || [ ${#as_user[@]} -gt 0 ]; then
  shut=$(mktemp -d) && chmod 755 "$shut"
  "$rrfp" simulate --pp 4 -m 8 --json "$shut/keep.json" >/dev/null || fail "simulate --json keep"
  chmod 666 "$shut/keep.json" && cp "$shut/keep.json" keep.before && chmod 555 "$shut"
  ("${as_user[@]}" bash -c "ulimit -f 4; exec \"\$0\" \"\$@\"" "$rrfp" simulate \
    --pp 4 -m 8 --workload uniform --json "$shut/keep.json" >/dev/null 2>err)
  rc=$?
  [ "$rc" -eq 1 ] && grep -q "writing failed: File too large (nothing written)" err ||
    fail "in place past a size limit: exit $rc, $(cat err)"
  cmp -s "$shut/keep.json" keep.before || fail "in place: a failed write changed the output"
  chmod 755 "$shut" && rm -rf "$shut"
else
  echo "root without setpriv: the in-place write is not checked"
fi
# A trace of 2.2 MB under a 100 KB limit (SIGXFSZ killed the process, its temporary left).
(ulimit -f 100; "$rrfp" simulate --pp 64 -m 512 --trace big.json >/dev/null 2>err)
rc=$?
[ "$rc" -eq 1 ] && grep -q "^rrfp: run failed: --trace: 'big.json': writing failed: File too large" err ||
  fail "--trace past a 100 KB limit: exit $rc, $(cat err)"
ls -A | grep -q '^\.rrfp-' && fail "--trace past a size limit left its temporary"

# An output naming a descriptor the shell opened (/dev/stdout, /dev/stderr, /dev/fd/N) is
# written through it, appending where the shell appends: it followed the link to the file and
# renamed a temporary over it, so three runs into `>>all.txt` left the last run's JSON alone.
echo earlier >all.txt
for _ in 1 2 3; do "$rrfp" simulate --pp 2 -m 4 --json /dev/stdout >>all.txt || fail "--json /dev/stdout"; done
[ "$(head -1 all.txt)" = earlier ] && [ "$(grep -c '^{' all.txt)" -eq 3 ] ||
  fail "--json /dev/stdout >>all.txt: $(head -1 all.txt), $(grep -c '^{' all.txt) reports of 3"
echo earlier >err.log
"$rrfp" simulate --pp 2 -m 4 --svg /dev/stderr >/dev/null 2>>err.log || fail "--svg /dev/stderr"
"$rrfp" simulate --pp 2 -m 4 --svg /dev/fd/2 >/dev/null 2>>err.log || fail "--svg /dev/fd/2"
[ "$(head -1 err.log)" = earlier ] && [ "$(grep -c '<svg' err.log)" -eq 2 ] ||
  fail "--svg /dev/stderr 2>>err.log: $(head -1 err.log), $(grep -c '<svg' err.log) of 2 SVGs"
echo earlier >fd5.txt
"$rrfp" simulate --pp 2 -m 4 --trace /dev/fd/5 >/dev/null 5>>fd5.txt || fail "--trace /dev/fd/5"
[ "$(head -1 fd5.txt)" = earlier ] && grep -q traceEvents fd5.txt ||
  fail "--trace /dev/fd/5 5>>fd5.txt: $(head -c 80 fd5.txt)"
# The file stdout was sent to, named as such, is stdout: the report alone lands in it, as with
# `--json -` (the report was renamed over it, and the table went to the file unlinked; then
# both landed in it, no longer JSON).
"$rrfp" simulate --pp 2 -m 4 --json same.txt >same.txt || fail "--json same.txt >same.txt"
/usr/bin/python3 -m json.tool same.txt >/dev/null || fail "--json same.txt >same.txt: $(tail -c 80 same.txt)"
"$rrfp" simulate --pp 2 -m 4 --json /dev/stdout 2>/dev/null | /usr/bin/python3 -m json.tool >/dev/null ||
  fail "--json /dev/stdout: stdout is not the JSON alone"
# A descriptor opened read-write at the file's start (`3<>f`) is no place to append: the report
# is written as over any file (it landed at byte 0, the old tail after it).
head -c 9000 /dev/zero | tr '\0' x >rw.txt
"$rrfp" simulate --pp 2 -m 4 --json /dev/fd/3 3<>rw.txt >/dev/null || fail "--json /dev/fd/3 3<>rw.txt"
/usr/bin/python3 -m json.tool rw.txt >/dev/null || fail "--json /dev/fd/3 3<>rw.txt: $(tail -c 40 rw.txt)"
# Standard output by name, its reader gone under an ignored SIGPIPE, ends as `--json -` does:
# quietly, 141 (it failed the run, exit 1, "Broken pipe"). Its report (93 KB) outgrows the pipe
# (64 KiB), so the write waits for the reader, which closes its end unread: one of 47 KB could
# be written whole before the reader closed, and the run end 0.
(
  trap '' PIPE
  "$rrfp" simulate --pp 128 -m 128 --json /dev/stdout 2>pipe.err | (exec 0<&-; sleep 1)
  exit "${PIPESTATUS[0]}"
)
rc=$?
[ "$rc" -eq 141 ] && [ ! -s pipe.err ] || fail "--json /dev/stdout into a closed pipe: exit $rc, $(cat pipe.err)"
# Standard output however named is one output: these wrote both reports into one stream.
check "--trace: '/dev/stdout' (where stdout goes) is for --json only; give a file" \
  simulate --pp 2 -m 4 --json - --trace /dev/stdout
check "--svg: '/dev/fd/1' (where stdout goes) is for --json only" simulate --pp 2 -m 4 --json - --svg /dev/fd/1
check "--trace: '/dev/stdout' (where stdout goes) is for --json only" \
  simulate --pp 2 -m 4 --trace /dev/stdout

# Standard output that cannot be written fails the command with the first failed write's
# reason: a report of more than stdio's 4 KiB buffer said "writing standard output failed" and
# no more (its errno was asked after the last flush), and help went nowhere with exit 0.
for args in "simulate --pp 2 -m 4 --json -" "simulate --pp 2 -m 4" "--help-all" "simulate --help"; do
  # shellcheck disable=SC2086
  "$rrfp" $args >/dev/full 2>err
  rc=$?
  [ "$rc" -eq 1 ] && [ "$(wc -l <err)" -eq 1 ] && grep -q "failed: No space left on device$" err ||
    fail "rrfp $args >/dev/full: exit $rc, $(cat err)"
done

# An output that fails after others were written names them (they stay): it named only itself.
for args in "sweep --pp 4 --seeds 1 --quiet --csv w1.csv --md /dev/full" \
  "simulate --pp 4 -m 8 --hint bf --svg w1.csv --json /dev/full" \
  "plan --pp 4 -m 8 --max-evaluations 3 --out w1.csv --json /dev/full"; do
  rm -f w1.csv
  # shellcheck disable=SC2086
  "$rrfp" $args >/dev/null 2>err
  rc=$?
  [ "$rc" -eq 1 ] && [ -s w1.csv ] && grep -q "No space left on device (--[a-z]* w1.csv written before it, and kept)$" err ||
    fail "rrfp $args: exit $rc, $(cat err)"
done

# A written output replaces the file a link names (the link stays) and keeps its mode.
"$rrfp" schedule show --out real.txt >/dev/null && chmod 600 real.txt && ln -s real.txt link.txt
"$rrfp" schedule show --hint gpipe --out link.txt >/dev/null || fail "schedule show --out link"
[ -L link.txt ] && grep -q "F" real.txt || fail "--out through a link replaced the link"
[ "$(stat -c %a real.txt)" = 600 ] || fail "--out: mode $(stat -c %a real.txt), want 600"
# A link made before its file (to another disk): the file is made where it points, as a shell's
# redirection makes it (the link was replaced by the file, and its folder got nothing). Where
# that folder is missing, refused before the work, naming it.
mkdir -p elsewhere && ln -s elsewhere/made.json ahead.json && ln -s nowhere/x.json lost.json
"$rrfp" simulate --pp 2 -m 2 --json ahead.json >/dev/null || fail "--json through a dangling link"
[ -L ahead.json ] && [ -s elsewhere/made.json ] || fail "--json through a dangling link replaced the link"
check "--json: 'lost.json': its folder './nowhere' does not exist" simulate --pp 2 -m 2 --json lost.json

# '-' is stdout for --json alone, as simulate's --trace and --svg refuse it: these wrote a file
# named "-" and exited 0.
data=$here/data
check "--svg: '-' (stdout) is for --json only; give a file" predict "$data/torch-pp2" --svg -
# A command without --json says so (sweep said "is for --json only", a flag it has not got).
check "--csv: '-' (stdout) is not taken (this command has no --json; stdout carries its own lines); give a file" \
  sweep --pp 2 --mb-factors 1 --seeds 1 --csv -
check "--md: '-' (stdout) is not taken (this command has no --json" sweep --pp 2 --mb-factors 1 --seeds 1 --md -
# The CSV is always written: an empty name ran the whole grid, then failed (exit 1) to rename
# its temporary over ''.
check "--csv: '' names nothing; give a value" sweep --pp 2 --mb-factors 1 --seeds 1 --csv ''
[ -s "$tmp/out" ] && fail "sweep --csv '' ran its grid before refusing it"
# So every text option: each was taken as not given (\`--replay ""\` simulated the default
# workload, \`--json ""\` or \`--md ""\` wrote nothing, all exit 0).
check "--replay: '' names nothing; give a value (\`rrfp simulate --help\` says what it takes; an unset shell variable?)" simulate --pp 2 -m 4 --replay ''
# After '=' too: CLI11 took the next word for the value ("'3': rrfp simulate takes no such value").
check "--hint: '' names nothing; give a value (\`rrfp simulate --help\`" simulate --pp 2 -m 4 --hint= --seed 3
check "--hint: '' names nothing; give a value (\`rrfp schedule show --help\`" schedule show --hint=
check "--pp: '' is not a whole number" simulate --pp= -m 4
check "--per-stage: '' names nothing; give the flag alone, or leave it out" simulate --per-stage=
check "--json: '' names nothing; give a value" simulate --pp 2 -m 4 --json ''
check "--md: '' names nothing; give a value" sweep --pp 2 --mb-factors 1 --seeds 1 --md ''
check "TRACE: '' names nothing; give a value" predict ''
check "--out: '' names nothing; give a value" plan --pp 2 -m 4 --out ''
check "--out: '-' (stdout) is for --json only" plan --pp 2 -m 4 --out -
check "--out: '-' (stdout) is for --json only" calibrate --out -
check "--out: '-' (stdout) is not taken (this command has no --json" schedule show --out -
# Stdout under another name: `plan --out h.txt > h.txt` wrote the hint and the report into one
# file, no longer a hint (check sends stdout to $tmp/out).
check "--out: '$tmp/out' (where stdout goes) is for --json only" plan --pp 2 -m 4 --out "$tmp/out"
check "--csv: '/dev/stdout' (where stdout goes) is not taken" \
  sweep --pp 2 --mb-factors 1 --seeds 1 --csv /dev/stdout
check "--out: '/dev/stdout' (where stdout goes) is not taken" schedule show --out /dev/stdout
# With the JSON on stdout the report's lines go to stderr: an output there took them in
# (check sends stderr to $tmp/err).
check "--out: '$tmp/err' (where stderr goes) takes the report's lines" \
  plan --pp 2 -m 4 --json - --out "$tmp/err"
# train writes a folder of files: '-' made a folder named "-" (checked below), refused in rrfp
# before rrfp-train is run, so in every build.
check "--out: '-' (stdout) is not taken: train writes its files" train --steps 1 --out -
# schedule show checks --out before its diagram, in the other commands' words: a missing folder
# or a directory printed the whole diagram, then exited 2 ("cannot be written: No such file").
check "--out: '$tmp/none/h.json': its folder '$tmp/none' does not exist" \
  schedule show --out "$tmp/none/h.json"
[ -s "$tmp/out" ] && fail "schedule show drew its diagram before refusing --out"
check "--out: '$tmp' is a directory, not a file" schedule show --out "$tmp"
[ -s "$tmp/out" ] && fail "schedule show drew its diagram before refusing a directory"
check "--out: 'bf' is a rule hint, it has no task list" schedule show --hint bf --out h.txt
[ -s "$tmp/out" ] && fail "schedule show drew its diagram before refusing a rule hint"
[ -e ./- ] && fail "an output flag wrote a file named '-'"
"$rrfp" predict "$data/torch-pp2" --json - 2>/dev/null | head -c 1 | grep -q '{' ||
  fail "predict --json - is not JSON on stdout"

# A hint file written under any name is read back by --hint, as plan's report says: best.plan
# and my.hint were "unknown hint", and best.JSON was written as text (its JSON test took case).
# The command the report prints reproduces the plan as printed: it left out --seed, and a plan
# of a step drawn with --seed 5 simulated another step.
"$rrfp" plan --pp 2 -m 4 --workload jitter:J2 --seed 5 --limit 3 --max-evaluations 20 \
  --exact off --out best.plan --json plan.json >plan.txt || fail "plan --out best.plan"
want_cmd="rrfp simulate --hint best.plan --policy fixed --workload jitter:J2 --seed 5"
grep -qxF "wrote best.plan; reproduced by: $want_cmd" plan.txt || fail "plan: $(tail -1 plan.txt)"
# shellcheck disable=SC2086 # the printed command's words, as a user pastes them
"$rrfp" ${want_cmd#rrfp } --json sim.json >/dev/null || fail "simulate --hint best.plan"
want=$(grep -o '"makespan_ms": [0-9.]*' plan.json | head -1)
got=$(grep -o '"makespan_ms": [0-9.]*' sim.json | head -1)
[ "$want" = "$got" ] || fail "best.plan: plan made '$want', simulate '$got'"
"$rrfp" plan --pp 2 -m 4 --max-evaluations 20 --exact off --out best.JSON >/dev/null ||
  fail "plan --out best.JSON"
head -c 1 best.JSON | grep -q '{' || fail "plan --out best.JSON wrote text"
"$rrfp" simulate --pp 2 -m 4 --hint best.JSON --policy fixed >/dev/null || fail "--hint best.JSON"
"$rrfp" schedule show --hint zb-h1 --out my.hint >/dev/null || fail "schedule show --out my.hint"
"$rrfp" simulate --pp 4 -m 8 --hint my.hint --policy fixed >/dev/null || fail "--hint my.hint"
"$rrfp" schedule show --out Sched.Json >/dev/null && head -c 1 Sched.Json | grep -q '{' ||
  fail "schedule show --out Sched.Json wrote text"
# A built-in hint's name runs that hint, never the file: refused as an output name.
check "--out: '1f1b' is a built-in hint's name, which --hint runs instead of the file" \
  plan --pp 2 -m 4 --out 1f1b
check "--out: 'gpipe' is a built-in hint's name" schedule show --out gpipe
[ -e 1f1b ] || [ -e gpipe ] && fail "a refused --out wrote its file"
check "unknown hint 'best.plan2' (expected one of" simulate --hint best.plan2
# ... whatever the working folder holds: a folder named adaptive took the hint's split backward
# away (its split was read from the folder, silently), and one named bfw failed the default
# table.
before=$("$rrfp" simulate --pp 2 -m 4 --hint adaptive | grep '^ready adaptive')
mkdir -p adaptive bfw
after=$("$rrfp" simulate --pp 2 -m 4 --hint adaptive | grep '^ready adaptive')
[ -n "$before" ] && [ "$before" = "$after" ] || fail "a folder adaptive: '$after', not '$before'"
"$rrfp" simulate --pp 2 -m 4 >/dev/null || fail "the default table beside a folder bfw"
rmdir adaptive bfw

# sweep's limit column is the ready policy's, "-" for the fixed runs as in simulate's table:
# fixed 1F1B and ZB-H1 rows showed --limits 1 beside peak_d_max 4.
"$rrfp" sweep --pp 4 --mb-factors 2 --seeds 1 --workloads uniform --limits 1 --csv lim.csv \
  >/dev/null || fail "sweep --limits 1"
limits=$(cut -d, -f6,8 lim.csv | tail -n +2 | tr '\n' ';')
[ "$limits" = "-,fixed 1f1b (blocking);-,fixed 1f1b (async);-,fixed zb-h1 (async);1,rrfp bf (async);1,rrfp bfw (async);" ] ||
  fail "sweep limit column: $limits"

# A preset's rows carry its one name, as the duplicate check knows it: "jitter" and
# "jitter:j1" were written as typed, and the same preset's rows of two sweeps did not join.
"$rrfp" sweep --pp 2 --mb-factors 1 --seeds 1 --workloads jitter,jitter:j1 --csv names.csv \
  >/dev/null || fail "sweep of two jitter spellings"
names=$(cut -d, -f1 names.csv | tail -n +2 | sort -u | tr '\n' ' ')
[ "$names" = "jitter:J1 jitter:J2 " ] || fail "sweep workload names: $names"

# A hint file named in Latin-1 (and so every label that names it): the timeline SVG holds
# U+FFFD where the JSON and the trace do, and opens as XML (its raw byte made it a document no
# XML reader takes).
latin1=$(printf 'lat\xe9.txt')
"$rrfp" schedule show --pp 2 -m 3 --hint 1f1b --out "$latin1" >/dev/null &&
  "$rrfp" simulate --pp 2 -m 3 --hint "$latin1" --policy fixed --svg latin1.svg >/dev/null ||
  fail "simulate with a Latin-1 hint file name"
/usr/bin/python3 -c 'import sys, xml.etree.ElementTree as e; e.parse(sys.argv[1])' latin1.svg ||
  fail "the timeline SVG of a Latin-1 hint file name is no XML"
grep -q $'fixed lat\xef\xbf\xbd.txt' latin1.svg || fail "the SVG does not name the hint with U+FFFD"

# Two runs of 1001 stages in one trace: each stage its own process id (run 1's stage 0 took
# run 0's stage 1000's), so the trace reads back.
"$rrfp" simulate --pp 1001 -m 1 --hint 1f1b --policy both --workload uniform --trace wide.json \
  >/dev/null || fail "simulate --pp 1001 --policy both --trace"
"$rrfp" simulate --replay wide.json --pp 1001 -m 1 --hint 1f1b --policy fixed >/dev/null 2>wide.err ||
  fail "a trace of 1001 stages and two runs does not read back: $(cat wide.err)"

# An output naming standard output, which the caller closed: refused, exit 2 (it wrote the
# report into /dev/null, which holds the closed stream's number, and exited 0); `-` still fails
# as a closed stdout does.
"$rrfp" simulate --pp 2 -m 2 --workload uniform --json /dev/stdout >&- 2>closed.err
rc=$?
[ $rc -eq 2 ] && grep -q "'/dev/stdout' names standard output, which is closed" closed.err ||
  fail "--json /dev/stdout with stdout closed: exit $rc: $(cat closed.err)"
"$rrfp" simulate --pp 2 -m 2 --workload uniform --json - >&- 2>closed.err
rc=$?
[ $rc -eq 1 ] && grep -q "writing standard output failed: Bad file descriptor" closed.err ||
  fail "--json - with stdout closed: exit $rc: $(cat closed.err)"

# run's JSON gives each run's dispatch gaps, which the line for people pools: with one run the
# same median, p99 and count (they were printed and never written); a simulation has none.
"$rrfp" run --pp 2 -m 4 --hint bf --policy ready --workload uniform --repeat 1 --json gaps.json \
  >gaps.txt || fail "run --json gaps.json"
/usr/bin/python3 - gaps.json gaps.txt <<'PY' || fail "run's JSON does not carry its dispatch gaps"
import json, re, sys
g = json.load(open(sys.argv[1]))["runs"][0]["dispatch_gap_us"]
line = re.search(r"median ([0-9.]+) us, p99 ([0-9.]+) us over ([0-9]+) dispatches",
                 open(sys.argv[2]).read())
assert g["dispatches"] == int(line[3]) > 0, (g, line[0])
assert f'{g["median"]:.1f}' == line[1] and f'{g["p99"]:.1f}' == line[2], (g, line[0])
assert g["median"] <= g["p99"], g
PY
"$rrfp" simulate --pp 2 -m 4 --json sim.json >/dev/null || fail "simulate --json sim.json"
/usr/bin/python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); assert r["seed"] == 1
assert "dispatch_gap_us" not in r["runs"][0]' sim.json || fail "a simulation's JSON has dispatch gaps"

# A replay draws nothing: its header and JSON name no seed (they said seed=1). A run with no W
# has no W cap in the JSON (ready bf said 2, beside "split_backward": false).
"$rrfp" simulate --pp 2 -m 4 --workload uniform --trace rt.json >/dev/null || fail "a trace"
"$rrfp" simulate --replay rt.json --pp 2 -m 4 --json rj.json >rt.txt || fail "its replay"
grep -q "seed=" rt.txt && fail "a replay's header names a seed: $(head -1 rt.txt)"
/usr/bin/python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); assert r["seed"] is None
caps = {x["label"]: x["max_pending_w"] for x in r["runs"]}
assert caps == {"fixed 1f1b (blocking)": None, "fixed 1f1b (async)": None,
                "ready bf (async)": None, "ready bfw (async)": 2}, caps' rj.json ||
  fail "a replay's JSON: a seed, or a W cap without W"
# A sweep's CSV gives a step under 1 ms to the nanosecond, as the reports do (0.022 and 0.002).
"$rrfp" sweep --pp 1 --mb-factors 1 --tp 1024 --seeds 1 --workloads uniform --csv us.csv \
  >/dev/null || fail "sweep of a step of microseconds"
grep -q ",rrfp bf (async),0.022153,0.912,0.097,0.002153," us.csv ||
  fail "a sweep's CSV rounds a step of microseconds: $(sed -n 5p us.csv)"
# schedule show past 26 chunks a stage names chunk 26 as itself (the letters came round: it
# was drawn as chunk 0's 'a'), and its rows keep their column past stage 99.
"$rrfp" schedule show --hint interleaved-1f1b --vpp 28 --pp 2 -m 2 >v28.txt || fail "vpp 28"
grep -q " F0\.27 " v28.txt && grep -q "; \.n = local chunk n" v28.txt && ! grep -q " F0a " v28.txt ||
  fail "schedule show at vpp 28: $(grep 'stage 0' v28.txt | cut -c1-80)"
"$rrfp" schedule show --hint 1f1b --pp 102 -m 1 >p102.txt || fail "pp 102"
[ "$(grep '^stage' p102.txt | awk '{print index($0, "|")}' | sort -u)" = 11 ] ||
  fail "schedule show's rows at pp 102 are not aligned: $(grep -E '^stage (99|100)' p102.txt | cut -c1-20)"
# A trace named .gz is gzip, as gzip's tools read it (it was plain JSON under that name), and
# reads back as its replay.
"$rrfp" simulate --pp 2 -m 3 --hint bfw --policy ready --workload language --trace g.JSON.GZ \
  >/dev/null || fail "simulate --trace g.JSON.GZ"
gzip -dc g.JSON.GZ | head -c 1 | grep -q '{' || fail "a .gz trace is not gzip: $(head -c 20 g.JSON.GZ)"
"$rrfp" simulate --pp 2 -m 3 --replay g.JSON.GZ >/dev/null || fail "a .gz trace does not read back"
"$rrfp" simulate --pp 2 -m 3 --trace plain.json >/dev/null && head -c 1 plain.json | grep -q '{' ||
  fail "a .json trace is not plain JSON"
# A stopped sweep's partial names must not be the other output's (its summary replaced the CSV).
check "--csv and --md: a stopped grid writes 'a.partial.partial.csv' and 'a.partial.csv', one of them the other output's name" \
  sweep --pp 2 --seeds 1 --csv a.partial.csv --md a.csv
# The JSON names the TP protocol that ran: none at TP 1 or for fixed lists (it said "leader").
for args in "--tp 1|null" "--tp 2 --hint 1f1b --policy fixed|null" "--tp 2|\"leader\""; do
  # shellcheck disable=SC2086
  "$rrfp" simulate --pp 2 -m 2 --workload uniform ${args%%|*} --json - 2>/dev/null |
    grep -q "\"tp_protocol\": ${args#*|}," || fail "the JSON's tp_protocol with ${args%%|*}"
done

[ "$fails" -eq 0 ] && echo "cli_outputs: all passed"
[ "$fails" -eq 0 ]
