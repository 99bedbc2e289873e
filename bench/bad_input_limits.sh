#!/usr/bin/env bash
# Time and peak memory of rrfp refusing hostile input: each case must end in well under a
# second with exit 2, and peak memory must stay at the process's own baseline, whatever the
# size of the input: about 6-7 MiB for `rrfp` (no LibTorch), about 160 MiB for `train`, which
# loads LibTorch in `rrfp-train` before it checks the values. Prints a Markdown table.
# Usage: bench/bad_input_limits.sh path/to/rrfp
set -uo pipefail
[ $# -eq 1 ] && [ -x "$1" ] || { echo "usage: $0 path/to/rrfp" >&2; exit 2; }
rrfp=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/corpus"
truncate -s 2G "$tmp/corpus/big.txt"  # sparse: no disk used
truncate -s 1G "$tmp/big.ckpt"
mkfifo "$tmp/fifo"
/usr/bin/python3 -c "print('{\"a\":' + '['*100000 + ']'*100000 + '}')" >"$tmp/deep.json"
cases=(
  "simulate --workload-file /dev/zero"
  "simulate --replay /dev/urandom"
  "simulate --hint /dev/zero"
  "simulate --workload-file $tmp/fifo"
  "simulate --workload-file $tmp/deep.json"
  "simulate --workload-file /tmp"
  "train --data $tmp/corpus --steps 1"
  "train --resume $tmp/big.ckpt --steps 1"
  "train --d-model 65536 --layers 64 --steps 1"
  "train --lr nan"
  "simulate --seed -1"
)
echo "| command | exit | seconds | peak RSS (MiB) |"
echo "|---|---|---|---|"
for c in "${cases[@]}"; do
  # shellcheck disable=SC2086
  out=$(/usr/bin/time -f "%e %M" timeout 60 "$rrfp" $c 2>&1 >/dev/null)
  rc=$(timeout 60 "$rrfp" $c >/dev/null 2>&1; echo $?)
  read -r secs kib <<<"$(tail -n 1 <<<"$out")"
  echo "| \`rrfp ${c//$tmp/TMP}\` | $rc | $secs | $((kib / 1024)) |"
done
