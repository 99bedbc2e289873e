# Sourced by the scripts that start rrfp runs and signal or wait on them (train_output.sh,
# train_signals.sh, cli_signals.sh): $1 the rrfp binary; sets rrfp, tmp (removed at exit, after
# the run whose process id is in $pid, if still there, is killed), fails and fail().
set -u
rrfp=$1
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
