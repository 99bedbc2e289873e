#!/usr/bin/env bash
# A user's name or value echoed back (a path, an option's value, a workload field, a trace's
# run label) is shown as one visible line: control bytes and bytes that are not UTF-8 as \xNN,
# a character never cut in half. A message cut at a newline in a path lost its reason ("does
# not exist"), one printed raw split in two or sent an escape sequence to the terminal.
# Usage: cli_names.sh PATH/TO/rrfp
here=$(cd "$(dirname "$0")" && pwd)
source "$here/cli_check.sh"

nl=$'\n'
check "--workload-file: '$tmp/no\\x0asuch.json' does not exist" \
  simulate --pp 2 -m 4 --workload-file "$tmp/no${nl}such.json"
check "--json: '$tmp/no\\x0adir/a.json': its folder '$tmp/no\\x0adir' does not exist" \
  simulate --pp 2 -m 4 --json "$tmp/no${nl}dir/a.json"
check "--pp: '1\\x0a2' is not a whole number" simulate --pp "1${nl}2"
check "unknown command 'sim\\x0aulate'" "sim${nl}ulate"
printf '{"compute_sigma": "\\u001b]0;x\\u0007"}' >"$tmp/esc.json"
check 'field "compute_sigma": must be a number, got "\x1b]0;x\x07"' \
  simulate --workload-file "$tmp/esc.json"
printf '{"a\\nb": 1}' >"$tmp/key.json"
check 'field "a\x0ab" is not a workload parameter' simulate --workload-file "$tmp/key.json"
e20=$(printf 'é%.0s' $(seq 20))
check "--pp: 'x$e20...' is not a whole number" simulate --pp "x$e20$e20"
"$rrfp" simulate --pp 2 -m 4 --trace "$tmp/t.json" >/dev/null
check "--hints: '${e20:0:15}...' is not a rule hint" predict --hints "$e20$e20" "$tmp/t.json"

# A hint file's name in the report's rows: one row, escaped.
printf 'stage 0: F0:0 F0:1 B0:0 B0:1\nstage 1: F1:0 B1:0 F1:1 B1:1\n' >"$tmp/h${nl}x.txt"
"$rrfp" simulate --pp 2 -m 2 --hint "$tmp/h${nl}x.txt" --policy fixed --per-stage >"$tmp/sim.out"
[ "$(grep -cF 'h\x0ax.txt (async)' "$tmp/sim.out")" -eq 2 ] ||
  { echo "FAIL: a hint file's name in the table:"; cat "$tmp/sim.out"; fails=$((fails + 1)); }

# plan --out names its file in a command that a shell reads back as one word.
"$rrfp" plan --pp 2 -m 4 --max-evaluations 20 --out "$tmp/my plan.txt" >"$tmp/plan.out" 2>&1
grep -qF -- "--hint '$tmp/my plan.txt' --policy fixed" "$tmp/plan.out" ||
  { echo "FAIL: plan --out with a blank:"; cat "$tmp/plan.out"; fails=$((fails + 1)); }

# ...and one whose name holds a newline as bash's $'...', which reads back as that name.
"$rrfp" plan --pp 2 -m 4 --max-evaluations 20 --out "$tmp/p${nl}q.txt" >"$tmp/plan.out" 2>&1
word=$(grep -o -- "--hint \$'[^ ]*'" "$tmp/plan.out" | head -1)
[ -n "$word" ] && [ "$(eval "printf %s ${word#--hint }")" = "$tmp/p${nl}q.txt" ] ||
  { echo "FAIL: plan --out with a newline:"; cat "$tmp/plan.out"; fails=$((fails + 1)); }

# The lines naming the files written show the names escaped (an escape sequence in a name
# reached the terminal).
esc=$'x\e[31m'
"$rrfp" simulate --pp 2 -m 4 --trace "$tmp/$esc.tr" --svg "$tmp/$esc.svg" >"$tmp/files.out"
grep -qF 'trace: '"$tmp"'/x\x1b[31m.tr' "$tmp/files.out" &&
  grep -qF 'timeline: '"$tmp"'/x\x1b[31m.svg' "$tmp/files.out" && ! grep -q $'\e' "$tmp/files.out" ||
  { echo "FAIL: written files' names raw:"; cat -v "$tmp/files.out"; fails=$((fails + 1)); }

# The headers naming an input file (a workload file, a replayed trace, a hint file) show it
# escaped too: raw, a newline split the line and an escape sequence reached the terminal.
printf '{"forward_us": 100}' >"$tmp/w${esc}${nl}y.json"
"$rrfp" simulate --pp 2 -m 4 --trace "$tmp/rec.json" >/dev/null
cp "$tmp/rec.json" "$tmp/r${esc}${nl}y.json"
printf 'stage 0: F0:0 F0:1 B0:0 B0:1\nstage 1: F1:0 B1:0 F1:1 B1:1\n' >"$tmp/s${esc}${nl}y.txt"
{
  "$rrfp" simulate --pp 2 -m 2 --workload-file "$tmp/w${esc}${nl}y.json" | head -1
  "$rrfp" run --pp 2 -m 2 --workload-file "$tmp/w${esc}${nl}y.json" | head -1
  "$rrfp" plan --pp 2 -m 4 --replay "$tmp/r${esc}${nl}y.json" --max-evaluations 5 | head -1
  "$rrfp" predict "$tmp/r${esc}${nl}y.json" | head -1
  "$rrfp" schedule show --pp 2 -m 2 --hint "$tmp/s${esc}${nl}y.txt" | head -1
} >"$tmp/heads.out" 2>&1
[ "$(grep -cF 'x\x1b[31m\x0ay' "$tmp/heads.out")" -eq 5 ] && ! grep -q $'\e' "$tmp/heads.out" ||
  { echo "FAIL: an input's name raw in a header:"; cat -v "$tmp/heads.out"; fails=$((fails + 1)); }

echo "cli name checks: $fails failed"
[ "$fails" -eq 0 ]
