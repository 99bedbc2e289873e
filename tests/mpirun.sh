#!/usr/bin/env bash
# Runs a program under mpirun the way the tests and docs do on one machine: N processes even on
# a 2-core box (--oversubscribe), threads free to use every core (--bind-to none), and allowed
# as root (CI containers run as root; see docs/mpi.md). Usage: mpirun.sh N program [args...]
set -euo pipefail
n=$1
shift
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# No network probing on one machine; shared memory between processes. Whether large messages
# move in one copy (CMA) is rrfp's choice at start-up, where the machine allows it (docs/mpi.md).
export OMPI_MCA_btl=self,vader
# One machine: start the processes directly, not through ssh (containers often have none).
export OMPI_MCA_plm=isolated
exec mpirun --oversubscribe --bind-to none -np "$n" "$@"
