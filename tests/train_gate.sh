# Sourced by the scripts with training checks, with $rrfp set and $torch the build's RRFP_TORCH
# (ON or OFF; empty: not said). Sets trains=ON or OFF from what `rrfp train` says, and fails
# (exit 1) where the build says otherwise, or where its rrfp-train is missing: such a build fails
# here instead of skipping those checks. (Captured, not piped into grep: under pipefail rrfp's exit 2
# would fail the pipeline.)
said=$("$rrfp" train --steps 0 2>&1)
case $said in
  *"no LibTorch"*) trains=OFF ;;
  *"rrfp-train must sit beside rrfp"*)  # a build with LibTorch whose rrfp-train is gone
    echo "FAIL: rrfp train cannot run: $said"
    exit 1
    ;;
  *) trains=ON ;;
esac
if [ -n "${torch:-}" ] && [ "$torch" != "$trains" ]; then
  echo "FAIL: the build has RRFP_TORCH=$torch, but rrfp train says training is $trains:"
  echo "$said"
  exit 1
fi
