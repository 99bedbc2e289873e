#!/usr/bin/env bash
# torchrun.sh PYTHON NPROC SCRIPT [ARGS...]: PYTHON -m torch.distributed.run with NPROC processes
# on a port free now, where each test named its own fixed one: two checkouts' suites on one
# machine (or any program holding that port) made a launch fail. The port is free when asked for
# and taken by torchrun's store once torchrun has started (a second or two); another program
# binding it in between is the one race left. --redirects 1 --tee 1: Debian's torch 1.13
# torchrun fails on Python 3.11 with its default output redirection (its Std flag enum).
# torchrun writes its workers' logs into a folder of its own, which it leaves (a /tmp/torchelastic_*
# folder each launch): here they go to one removed once torchrun ends, however it ends; TERM,
# INT and HUP are passed on to torchrun, which ends its workers.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 PYTHON NPROC SCRIPT [ARGS...]" >&2; exit 2; }
python=$1 nproc=$2
shift 2
# Below the ephemeral range (ports.py says why).
port=$("$python" "$(dirname "$0")/ports.py")
logs=$(mktemp -d "${TMPDIR:-/tmp}/rrfp-torchrun.XXXXXX")
trap 'rm -rf "$logs"' EXIT
"$python" -m torch.distributed.run --nproc_per_node "$nproc" --master_port "$port" \
  --redirects 1 --tee 1 --log_dir "$logs" "$@" <&0 &
pid=$!
trap 'kill -s TERM "$pid" 2>/dev/null || true' TERM INT HUP
rc=0
# A signal ends the wait early (status above 128) with torchrun still running: wait again.
while :; do
  wait "$pid" && rc=0 || rc=$?
  kill -0 "$pid" 2>/dev/null || break
done
exit "$rc"
