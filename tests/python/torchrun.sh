#!/usr/bin/env bash
# torchrun.sh PYTHON NPROC SCRIPT [ARGS...]: PYTHON -m torch.distributed.run with NPROC processes
# on a port free now, where each test named its own fixed one: two checkouts' suites on one
# machine (or any program holding that port) made a launch fail. The port is free when asked for
# and taken by torchrun's store once torchrun has started (a second or two); another program
# binding it in between is the one race left. --redirects 1 --tee 1: Debian's torch 1.13
# torchrun fails on Python 3.11 with its default output redirection (its Std flag enum).
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 PYTHON NPROC SCRIPT [ARGS...]" >&2; exit 2; }
python=$1 nproc=$2
shift 2
# Below the ephemeral range, from which the system picks the local ports of outgoing
# connections (other tests' Gloo connections among them): a port the system handed out as free
# could be taken by one of those before torchrun binds it.
port=$("$python" -c 'import random, socket
try:
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except (OSError, ValueError, IndexError):
    low = 32768
for _ in range(200):
    port = random.randrange(20000, max(low, 20001))
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            continue
    print(port)
    break
else:
    raise SystemExit("torchrun.sh: no free port in 20000..%d" % low)')
exec "$python" -m torch.distributed.run --nproc_per_node "$nproc" --master_port "$port" \
  --redirects 1 --tee 1 "$@"
