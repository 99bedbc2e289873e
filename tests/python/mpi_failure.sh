#!/usr/bin/env bash
# rrfp.Pipeline under mpirun when one process fails: a module that raises on rank 1 ends the
# whole job at once (the uncaught exception calls MPI_Abort), long before the others' timeout,
# with the StageError on stderr; mpirun exits non-zero and no python process is left behind.
# Then a process later to a step than arrival_timeout ends the job at the others' deadline.
# And a process that makes a step more than the others ends the job at once, as does a script
# ending while a daemon thread of it steps, and one building a pipeline while another steps;
# a pipeline built after that failed construction, kept alive, builds and steps.
# Usage: mpi_failure.sh TESTS_DIR PYTHON
set -uo pipefail
here=$1
py=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/fails.py" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import conftest  # noqa: F401  (the package path)
import torch
import rrfp

torch.manual_seed(0)  # every process passes the same batches


class Raises(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.calls = torch.nn.Linear(4, 4), 0

    def forward(self, x):
        self.calls += 1
        if self.calls == 3:
            raise ValueError("bad microbatch")
        return self.lin(x)


pipe = rrfp.Pipeline(lambda i: Raises() if i == 1 else torch.nn.Linear(4, 4),
                     lambda o, y: (o - y).square().sum(), pp=2, microbatches=2,
                     transport="mpi", timeout=60)
for _ in range(3):
    pipe.step(torch.randn(4, 4), torch.randn(4, 4))
PY
start=$SECONDS
# Both processes print a traceback into the one log at once, a line in several writes: without
# the carets' lines, and with the type and the message looked for apart, another's line cannot
# fall inside what is looked for (it did, 1 run in 28 on a loaded machine).
PYTHONNODEBUGRANGES=1 timeout 120 "$here/../mpirun.sh" 2 "$py" "$tmp/fails.py" "$here" \
  >"$tmp/log" 2>&1
rc=$?
took=$((SECONDS - start))
fail() { cat "$tmp/log"; echo "FAIL: $*"; exit 1; }
# none_left SCRIPT: no process of SCRIPT is left a second after mpirun ended.
none_left() {
  sleep 1
  local left
  left=$(pgrep -f "$1" || true)
  [ -z "$left" ] || { kill -9 $left; fail "processes left behind: $left"; }
}
[ $rc -ne 0 ] || fail "mpirun exited 0"
[ $rc -ne 124 ] || fail "the job was still running after 120 s"
[ $took -lt 30 ] || fail "the job took $took s to end (timeout 60 s: the abort did not happen)"
grep -q "StageError" "$tmp/log" &&
  grep -q "stage 1: task F c1 m0 failed: ValueError: bad microbatch" "$tmp/log" ||
  fail "no StageError naming stage 1's task"
# Our own line, printed just before MPI_Abort (Open MPI's notice of it is sometimes lost).
grep -q "rrfp: mpi rank 1: an uncaught exception ends the job (MPI_Abort)" "$tmp/log" ||
  fail "the job was not aborted"
none_left "$tmp/fails.py"
echo "a module raising on rank 1: mpirun exited $rc after $took s, no process left"

# A process later to a step than arrival_timeout (rank 1 sleeps 8 s, the limit is 2 s): the
# job ends at rank 0's deadline, the line naming the gather and the option.
cat >"$tmp/late.py" <<'PY'
import sys
import time
sys.path.insert(0, sys.argv[1])
import conftest  # noqa: F401  (the package path)
import lm
import rrfp

pipe = rrfp.Pipeline(lambda i: lm.chunks(2)[i], lm.loss_fn, pp=2, microbatches=2,
                     transport="mpi", timeout=1, arrival_timeout=2)
if pipe.rank == 1:
    time.sleep(8)
pipe.step(*lm.batches(2, seed=0))
PY
# ends_failing SCRIPT: runs it on 2 processes into $tmp/log, which must fail within 120 s;
# sets rc and took.
ends_failing() {
  local start=$SECONDS
  timeout 120 "$here/../mpirun.sh" 2 "$py" "$1" "$here" >"$tmp/log" 2>&1
  rc=$?
  took=$((SECONDS - start))
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "mpirun exited $rc"
}
ends_failing "$tmp/late.py"
grep -q "mpi rank 0: MPI_Allgather (the processes coming to a call) did not finish within 2 s: .*(the limit is \`arrival_timeout\`, or \`timeout\` where longer)" "$tmp/log" ||
  fail "no line naming the arrival's gather and arrival_timeout"
none_left "$tmp/late.py"
echo "a process 8 s late to a step under arrival_timeout=2: mpirun exited $rc after $took s"

# A process that makes one step more than the other, whose script ends: the two met in no
# collective (the end's barrier against the step's gather), and both waited out arrival_timeout
# (30 minutes by default), saying only that a process was late. The end is a gather as each call
# is: the job ends at once, rank 0 naming the call it ended beside, rank 1's step refused.
cat >"$tmp/extra.py" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import conftest  # noqa: F401  (the package path)
import lm
import rrfp

pipe = rrfp.Pipeline(lambda i: lm.chunks(2)[i], lm.loss_fn, pp=2, microbatches=2,
                     transport="mpi", timeout=60)
for _ in range(2 + pipe.rank):
    pipe.step(*lm.batches(2, seed=0))
PY
ends_failing "$tmp/extra.py"  # a hang (arrival_timeout, 30 min) is mpirun's 124 at 120 s
grep -q "rrfp: mpi rank 0: the script ended while mpi rank(s) 1 made a call of the pipeline" \
  "$tmp/log" || fail "no line naming the process still making a call"
none_left "$tmp/extra.py"
echo "a process making a step more than the other: mpirun exited $rc after $took s"

# A step that times out on one process and completes on the other, the error caught and the
# loop going on: the timed-out process skipped the step's closing gather, its next call's gather
# paired with it, and (pp 2 x dp 2) one update mixed two steps' batches, exit 0. The job now
# ends at once, saying the processes are out of step.
cat >"$tmp/stalled.py" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import conftest  # noqa: F401  (the package path)
import lm
import rrfp

step = [0]


def delay(stage, kind, chunk, mb):  # stage 0's last backward of step 1, past `timeout`
    return 3.0 if stage == 0 and kind == "B" and mb == 1 and step[0] == 1 else None


pipe = rrfp.Pipeline(lambda i: lm.chunks(2)[i], lm.loss_fn, pp=2, microbatches=2,
                     transport="mpi", timeout=1, hint="1f1b", delay_fn=delay)
for s in range(4):
    step[0] = s
    try:
        pipe.step(*lm.batches(2, seed=s))
    except (TimeoutError, RuntimeError) as e:
        print(f"rank {pipe.rank} step {s}: {type(e).__name__}", flush=True)
PY
ends_failing "$tmp/stalled.py"
grep -q "rrfp: error: the processes of the job are out of step (mpi rank 1 in the end of a step" \
  "$tmp/log" || fail "no line saying the processes are out of step"
none_left "$tmp/stalled.py"
echo "a step timed out on one process and completed on the other: mpirun exited $rc after $took s"

# A daemon thread stepping as the script ends: its step's collectives and the end's were posted
# from two threads on one communicator, in another order on each process, and crossed: a clean
# end, a false report of a process in a call, or a wait until arrival_timeout, by chance. The
# job now ends at once, the process naming the call its other thread was making.
cat >"$tmp/daemon.py" <<'PY'
import sys
import threading
import time
sys.path.insert(0, sys.argv[1])
import conftest  # noqa: F401  (the package path)
import lm
import rrfp

pipe = rrfp.Pipeline(lambda i: lm.chunks(2)[i], lm.loss_fn, pp=2, microbatches=2,
                     transport="mpi", timeout=60)
batch = lm.batches(2, seed=0)
stepping = threading.Event()


def train():
    while True:
        stepping.set()
        pipe.step(*batch)


threading.Thread(target=train, daemon=True).start()
stepping.wait()
time.sleep(1)
PY
ends_failing "$tmp/daemon.py"
# A process whose daemon is between two steps as its script ends refuses the daemon's next
# step; the other's daemon, in a step, is then named as the process making a call.
grep -Eq "the script ended while (another thread of this process \(a daemon thread, say\) was in the pipeline's step\(\)|mpi rank\(s\) [01] made a call of the pipeline)" \
  "$tmp/log" || fail "no line naming the other thread's call"
none_left "$tmp/daemon.py"
echo "a daemon thread stepping as the script ends: mpirun exited $rc after $took s"

# A process building a pipeline of a new layout (its last one deleted) while the other steps
# its last one: the new layout's MPI_Comm_split met the step's gather, and both waited until
# arrival_timeout (30 minutes by default) without a word. The split now waits for the
# construction's gather, where the two calls are found apart at once.
cat >"$tmp/rebuild.py" <<'PY'
import gc
import sys
sys.path.insert(0, sys.argv[1])
import conftest  # noqa: F401  (the package path)
import lm
import rrfp


def make():
    return rrfp.Pipeline(lambda i: lm.chunks(2)[i], lm.loss_fn, pp=2, microbatches=2,
                         transport="mpi", timeout=60)


pipe = make()
pipe.step(*lm.batches(2, seed=0))
if pipe.rank == 0:
    del pipe
    gc.collect()
    pipe = make()
pipe.step(*lm.batches(2, seed=0))
PY
ends_failing "$tmp/rebuild.py"
grep -q "not making the same call (job rank 0 in Pipeline() after 0 steps, job rank 1 in step() after 1 steps" \
  "$tmp/log" || fail "no line naming the two calls"
none_left "$tmp/rebuild.py"
echo "a pipeline built on one process while the other steps: mpirun exited $rc after $took s"

# The same refusal caught, the pipeline that failed to build kept alive by the traceback: it
# counted among the layout's pipelines, under the layout recorded before it (pp=2, dp=1), so a
# pipeline of its own layout built next was refused on that process alone, naming a layout no
# pipeline had, while the other waited in the construction's gather. A pipeline joins its
# layout once it has split the communicators: the next one builds and steps.
cat >"$tmp/caught.py" <<'PY'
import gc
import sys
sys.path.insert(0, sys.argv[1])
import conftest  # noqa: F401  (the package path)
import lm
import rrfp


def make(pp, dp):
    return rrfp.Pipeline(lambda i: lm.chunks(pp)[i], lm.loss_fn, pp=pp, dp=dp, microbatches=2,
                         transport="mpi", timeout=60, arrival_timeout=20)


pipe = make(2, 1)
pipe.step(*lm.batches(2, seed=0))
rank, failed = pipe.rank, None
try:
    if rank == 0:  # another layout while the other process steps: both raise
        del pipe
        gc.collect()
        make(1, 2)
    else:
        pipe.step(*lm.batches(2, seed=0))
except RuntimeError as e:
    # Rank 0's traceback holds the pipeline that failed to build; rank 1 lets its own go.
    failed = e if rank == 0 else str(e)
assert "not making the same call" in str(failed), failed
pipe = None
gc.collect()
pipe = make(1, 2)
pipe.step(*lm.batches(2, seed=0))
print(f"rank {rank} stepped the new layout")
PY
start=$SECONDS
timeout 120 "$here/../mpirun.sh" 2 "$py" "$tmp/caught.py" "$here" >"$tmp/log" 2>&1
rc=$?
took=$((SECONDS - start))
[ $rc -eq 0 ] || fail "a pipeline built after a failed construction: mpirun exited $rc"
# Counted as they occur, not by line: the two processes' lines may land in one.
[ "$(grep -o "stepped the new layout" "$tmp/log" | wc -l)" -eq 2 ] || fail "not both processes stepped"
none_left "$tmp/caught.py"
echo "a pipeline built after one that failed to build: both stepped in $took s"
