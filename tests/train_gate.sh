# Sourced by the scripts with training checks, with $rrfp set and $torch the build's RRFP_TORCH
# (ON or OFF; empty: not said). Sets trains=ON or OFF from what `rrfp train` says, and fails
# (exit 1) where the build says otherwise: a build whose rrfp-train is missing fails here
# instead of skipping those checks. (Captured, not piped into grep: under pipefail rrfp's exit 2
# would fail the pipeline.)
said=$("$rrfp" train --steps 0 2>&1)
case $said in *"no LibTorch"*) trains=OFF ;; *) trains=ON ;; esac
if [ -n "${torch:-}" ] && [ "$torch" != "$trains" ]; then
  echo "FAIL: the build has RRFP_TORCH=$torch, but rrfp train says training is $trains:"
  echo "$said"
  exit 1
fi
