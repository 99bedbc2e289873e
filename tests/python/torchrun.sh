#!/usr/bin/env bash
# torchrun.sh PYTHON NPROC SCRIPT [ARGS...]: PYTHON -m torch.distributed.run with NPROC processes
# on a port free now, where each test named its own fixed one: two checkouts' suites on one
# machine (or any program holding that port) made a launch fail. The port is free when asked for
# and taken by torchrun's store a moment later; another program taking it in between is the one
# race left. --redirects 1 --tee 1: Debian's torch 1.13 torchrun fails on Python 3.11 with its
# default output redirection (its Std flag enum).
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 PYTHON NPROC SCRIPT [ARGS...]" >&2; exit 2; }
python=$1 nproc=$2
shift 2
port=$("$python" -c 'import socket
s = socket.socket()
s.bind(("", 0))
print(s.getsockname()[1])')
exec "$python" -m torch.distributed.run --nproc_per_node "$nproc" --master_port "$port" \
  --redirects 1 --tee 1 "$@"
