#!/usr/bin/env bash
# Time and peak memory of rrfp refusing hostile input: each case must end in well under a
# second with exit 2, and peak memory must stay at the process's own baseline, whatever the
# size of the input: about 6-7 MiB for `rrfp` (no LibTorch), about 160 MiB for `train`, which
# loads LibTorch in `rrfp-train` before it checks the values. Prints a Markdown table.
# Usage: bench/bad_input_limits.sh path/to/rrfp
set -uo pipefail
[ $# -eq 1 ] && [ -f "$1" ] && [ -x "$1" ] || { echo "usage: $0 path/to/rrfp" >&2; exit 2; }
command -v /usr/bin/time >/dev/null || { echo "$0: needs GNU time (apt-get install time)" >&2; exit 2; }
rrfp=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/corpus"
truncate -s 2G "$tmp/corpus/big.txt"  # sparse: no disk used
truncate -s 1G "$tmp/big.ckpt"
mkfifo "$tmp/fifo"
/usr/bin/python3 -c "print('{\"a\":' + '['*100000 + ']'*100000 + '}')" >"$tmp/deep.json"
# Each case a line of words, TMP standing for the temporary folder: split on spaces before it
# is put in, so that a TMPDIR with a space stays one argument (it measured a refusal of a
# stray word instead of the input).
cases=(
  "simulate --workload-file /dev/zero"
  "simulate --replay /dev/urandom"
  "simulate --hint /dev/zero"
  "simulate --workload-file TMP/fifo"
  "simulate --workload-file TMP/deep.json"
  "simulate --workload-file /tmp"
  "train --data TMP/corpus --steps 1"
  "train --resume TMP/big.ckpt --steps 1"
  "train --d-model 65536 --layers 64 --steps 1"
  "train --lr nan"
  "simulate --seed -1"
)
echo "| command | exit | seconds | peak RSS (MiB) |"
echo "|---|---|---|---|"
bad=0
for c in "${cases[@]}"; do
  read -r -a words <<<"$c"
  args=("${words[@]//TMP/"$tmp"}")  # quoted: a & in it stays a &
  out=$(/usr/bin/time -f "%e %M" timeout 60 "$rrfp" "${args[@]}" 2>&1 >/dev/null)
  rc=$(timeout 60 "$rrfp" "${args[@]}" >/dev/null 2>&1; echo $?)
  read -r secs kib <<<"$(tail -n 1 <<<"$out")"
  echo "| \`rrfp $c\` | $rc | $secs | $((kib / 1024)) |"
  [ "$rc" -eq 2 ] || bad=$((bad + 1))
done
# Every case must be refused as bad input: another exit is a finding, not a row like the others.
[ $bad -eq 0 ] || { echo "$0: $bad case(s) did not exit 2" >&2; exit 1; }
