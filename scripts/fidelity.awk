# The rows of `rrfp run --compare`'s "simulator fidelity" table as CSV lines: WORKLOAD,SEED,run,
# measured_ms,simulated_ms,makespan_error_pct,speedup_measured,speedup_simulated,
# speedup_diff_pct,replayed_ms,replayed_error_pct. Counted from the end (a run's name has
# spaces): measured, simulated, error, replayed, error, both speedups, their difference.
# A --repeat report's last column (measured_range_ms) is left out. The table ends at its first
# line that is not a row (the start-up line follows it with no blank line between).
# Usage: awk -v w=WORKLOAD -v s=SEED [-v suffix=" limit 32"] -f scripts/fidelity.awk REPORT
/^simulator fidelity/ { on = 1; next }
on && /^run / { ranged = ($NF == "measured_range_ms"); next }
on && /^start-up/ { on = 0 }
on && NF >= 11 + ranged {
  n = NF - ranged; label = $1
  for (i = 2; i <= n - 8; ++i) label = label " " $i
  gsub(/[%+]/, "", $(n - 5)); gsub(/[%+]/, "", $(n - 3))
  gsub(/x/, "", $(n - 2)); gsub(/x/, "", $(n - 1)); gsub(/[%+]/, "", $n)
  print w "," s "," label suffix "," $(n - 7) "," $(n - 6) "," $(n - 5) "," $(n - 2) "," \
    $(n - 1) "," $n "," $(n - 4) "," $(n - 3)
}
on && NF < 11 + ranged { on = 0 }
