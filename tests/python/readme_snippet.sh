#!/usr/bin/env bash
# The README's Python snippet, unchanged, runs to the end in threads, under mpirun -np 4 and
# under torchrun --nproc_per_node 4: the transport follows the launcher, every rank gets the
# step's loss, and the last loss is bitwise the same in all three (one intra-op thread each, as
# torchrun sets, so no kernel sums in another order). Usage: readme_snippet.sh README.md PYTHON
set -uo pipefail
readme=$1 python=$2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
# The first ```python block after "## Use from PyTorch", with a check of the loss appended.
awk '/^## Use from PyTorch/ {on = 1} on && /^```python/ {grab = 1; next} grab && /^```/ {exit}
     grab {print}' "$readme" >"$tmp/snippet.py"
[ -s "$tmp/snippet.py" ] || { echo "FAIL: no python block in the README's 'Use from PyTorch'"; exit 1; }
# A checkpoint with the snippet's optimizer, over every chunk's parameters, and an Adagrad (which
# makes a state for each as it is built): a process per stage refused them ("parameters that are
# not this pipeline's chunks'"; the Adagrad's state of another process's chunk), where threads
# saved them. A step between the save and the load moves the state on; the load brings back
# this process's chunks' state as saved.
cat >>"$tmp/snippet.py" <<'PY'
assert isinstance(loss, torch.Tensor) and torch.isfinite(loss), loss
import os
mine = [p for c in pipe.chunks.values() for p in c.parameters()]
def states(o):
    return [t.clone() for p in mine for t in o.state[p].values() if torch.is_tensor(t)]
adagrad = torch.optim.Adagrad([p for c in chunks for p in c.parameters()], lr=1e-3)
for name, o in (("adamw", opt), ("adagrad", adagrad)):
    path = os.path.join(os.environ["SNIPPET_CKPT"], name)
    saved = states(o)
    pipe.save(path, o, step=20)
    o.zero_grad()
    pipe.step(x[:, :-1], x[:, 1:])
    o.step()
    assert not all(map(torch.equal, saved, states(o))), name
    assert pipe.load(path, o) == {"step": 20}
    after = states(o)
    assert len(saved) == len(after) > 0 and all(map(torch.equal, saved, after)), name
print(f"snippet done, loss {float(loss)!r}", flush=True)
PY
export OMP_NUM_THREADS=1
losses=()
run() {  # run NAME EXPECTED_RANKS COMMAND...
  local name=$1 ranks=$2
  shift 2
  SNIPPET_CKPT="$tmp/$name.ckpt" timeout 240 "$@" >"$tmp/$name.log" 2>&1
  local rc=$? done
  # Occurrences, not lines: two ranks' lines can meet on one line of mpirun's output.
  done=$(grep -o "snippet done" "$tmp/$name.log" | wc -l)
  if [ $rc -ne 0 ] || [ "$done" -ne "$ranks" ]; then
    echo "FAIL: $name: exit $rc, $done of $ranks ranks finished"; tail -5 "$tmp/$name.log"
    fails=$((fails + 1))
  else
    local l
    l=$(grep -o "snippet done, loss [-+0-9.e]*" "$tmp/$name.log" | sort -u)
    echo "ok: $name ($ranks rank(s)): $l"
    losses+=("$l")
  fi
}
run threads 1 "$python" "$tmp/snippet.py"
if command -v mpirun >/dev/null; then
  run mpirun 4 "$here/../mpirun.sh" 4 "$python" "$tmp/snippet.py"
fi
run torchrun 4 "$here/torchrun.sh" "$python" 4 "$tmp/snippet.py"
if [ ${#losses[@]} -gt 1 ] && [ "$(printf '%s\n' "${losses[@]}" | sort -u | wc -l)" -ne 1 ]; then
  echo "FAIL: the launchers' last losses differ: ${losses[*]}"
  fails=$((fails + 1))
fi
exit $((fails > 0))
