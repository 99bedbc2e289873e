#!/usr/bin/env bash
# rrfp calibrate's sizes: a size given twice is refused (exit 2, one line naming --sizes), and
# sizes too close to show a bandwidth write the latency alone, which a workload file laid over a
# preset keeps beside the preset's own bandwidth. Usage: cli_calibrate.sh PATH/TO/rrfp
here=$(cd "$(dirname "$0")" && pwd)
source "$here/cli_check.sh"
# 8,8 was measured twice and the two medians' difference written as 0.02 GB/s.
check "--sizes: '8' and '8' are both 8 bytes (each size at most once)" calibrate --sizes 8,8
# A trailing comma is an empty size, as a leading one is (it ran with the empty item dropped).
check "--sizes: '' is not a size from 1 to 1024M" calibrate --sizes 8,
check "--sizes: '64K' and '65536' are both 65536 bytes (each size at most once)" \
  calibrate --sizes 8,64K,65536
# 8,16 spans too little whatever the timings say (the largest under 8 times the smallest).
if "$rrfp" calibrate --sizes 8,16 --seconds 0.2 --out "$tmp/close.json" >"$tmp/out" 2>"$tmp/err"; then
  grep -q "the sizes span too little to fit a bandwidth (8 B to 16 B" "$tmp/out" ||
    { echo "FAIL: calibrate --sizes 8,16 says nothing of the span:"; cat "$tmp/out"; fails=$((fails + 1)); }
  grep -q '"comm_latency_us"' "$tmp/close.json" && ! grep -qE '"comm_(bandwidth_gbps|links)"' "$tmp/close.json" ||
    { echo "FAIL: calibrate --sizes 8,16 wrote more than the latency:"; cat "$tmp/close.json"; fails=$((fails + 1)); }
  "$rrfp" simulate --pp 2 -m 2 --workload language --workload-file "$tmp/close.json" >/dev/null ||
    { echo "FAIL: simulate --workload-file of a latency-only calibration"; fails=$((fails + 1)); }
else
  echo "FAIL: calibrate --sizes 8,16: $(cat "$tmp/err")"; fails=$((fails + 1))
fi
# The links come with a bandwidth or a size that costs nothing, never alone; 8 B to 64 KiB over
# threads may show neither (cli_calibrate.sh).
"$rrfp" calibrate --sizes 8,64K --seconds 0.2 --out "$tmp/cal.json" >/dev/null &&
  { grep -q '"size_cost": "unresolved' "$tmp/cal.json" || grep -qE '"comm_links": [0-9.]+' "$tmp/cal.json"; } &&
  grep -q '"comm_sigma": 0' "$tmp/cal.json" &&
  "$rrfp" simulate --pp 2 -m 2 --workload-file "$tmp/cal.json" >/dev/null ||
  { echo "FAIL: calibrate --out, then simulate --workload-file"; fails=$((fails + 1)); }
# --timeout bounds an MPI job's waits, as its help says; in one process its default is taken as
# the nothing it is (--timeout 60, offered by the help, was refused), another value refused
# (cli_bad_input.sh).
"$rrfp" calibrate --help | grep -q -- "--timeout FLOAT=60 *--transport mpi: seconds" ||
  { echo "FAIL: calibrate --help does not say --timeout is --transport mpi's"; fails=$((fails + 1)); }
"$rrfp" calibrate --timeout 60 --seconds 0.2 --sizes 8,64K >/dev/null 2>"$tmp/err" ||
  { echo "FAIL: calibrate --timeout 60 (its default): $(cat "$tmp/err")"; fails=$((fails + 1)); }
echo "cli calibrate checks: $fails failed"
[ "$fails" -eq 0 ]
