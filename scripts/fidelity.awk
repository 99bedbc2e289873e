# The rows of `rrfp run --compare`'s "simulator fidelity" table as CSV lines: WORKLOAD,SEED,run,
# measured_ms,simulated_ms,makespan_error_pct,speedup_measured,speedup_simulated,
# speedup_diff_pct,replayed_ms,replayed_error_pct. Counted from the end (a run's name has
# spaces): measured, simulated, error, replayed, error, both speedups, their difference.
# Usage: awk -v w=WORKLOAD -v s=SEED [-v suffix=" limit 32"] -f scripts/fidelity.awk REPORT
/^simulator fidelity/ { on = 1; next }
on && /^run / { next }
on && NF >= 11 {
  n = NF; label = $1
  for (i = 2; i <= n - 8; ++i) label = label " " $i
  gsub(/[%+]/, "", $(n - 5)); gsub(/[%+]/, "", $(n - 3))
  gsub(/x/, "", $(n - 2)); gsub(/x/, "", $(n - 1)); gsub(/[%+]/, "", $n)
  print w "," s "," label suffix "," $(n - 7) "," $(n - 6) "," $(n - 5) "," $(n - 2) "," \
    $(n - 1) "," $n "," $(n - 4) "," $(n - 3)
}
on && NF < 11 { on = 0 }
