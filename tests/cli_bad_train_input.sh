#!/usr/bin/env bash
# Bad input to `rrfp train`: exit code 2 and exactly one line on stderr naming the problem;
# never a crash. Usage: cli_bad_train_input.sh PATH/TO/rrfp [ON|OFF: whether the build has
# LibTorch]; without LibTorch (as the build and rrfp both say) there is nothing to check.
here=$(cd "$(dirname "$0")" && pwd)
source "$here/cli_check.sh"
if [ "$trains" != ON ]; then  # skipped (77), not passed: it checked nothing
  echo "cli bad-train-input checks: this build has no LibTorch"
  exit 77
fi
# `rrfp` copied away from its `rrfp-train`: the folder it looked in (it said the build had no
# LibTorch, and to install libtorch-dev).
mkdir -p "$tmp/alone" && cp "$rrfp" "$tmp/alone/rrfp"
built=$rrfp rrfp=$(cd "$tmp/alone" && pwd -P)/rrfp
check "rrfp train: rrfp-train must sit beside rrfp, and ${rrfp%rrfp} has none" train --steps 1 \
  --out "$tmp/o"
# An rrfp-train beside it that may not be run: said so (it was said to be missing).
mkdir -p "$tmp/noexec" && cp "$built" "${built%rrfp}rrfp-train" "$tmp/noexec/" &&
  chmod a-x "$tmp/noexec/rrfp-train"
rrfp=$(cd "$tmp/noexec" && pwd -P)/rrfp
check "rrfp train: cannot run ${rrfp%rrfp}rrfp-train: Permission denied (it must be executable" \
  train --steps 1 --out "$tmp/o"
rrfp=$built
mkdir -p "$tmp/empty"
check "--data: '/nonexistent' does not exist" train --data /nonexistent --out "$tmp/o"
check "--data: '$tmp/empty' holds no document" train --data "$tmp/empty" --out "$tmp/o"
mkdir -p "$tmp/t640" && head -c 640 /dev/zero >"$tmp/t640/a.txt"
check "--data: '$tmp/t640' holds no document of at least 641 bytes" train --data "$tmp/t640" \
  --max-len 64 --out "$tmp/o"
check "fewer than the 8 pipeline chunks" train --vpp 2 --out "$tmp/o"
check "--out: cannot write to directory '/proc/rrfp-out': No such file or directory" train --out /proc/rrfp-out
# A file where the folder should be: the reason said (it said none).
touch "$tmp/a-file"
check "--out: cannot write to directory '$tmp/a-file': Not a directory" train --out "$tmp/a-file"
# A link to nothing: the reason was "File exists".
ln -s "$tmp/nowhere/x" "$tmp/dangling"
check "--out: '$tmp/dangling' is a symbolic link to '$tmp/nowhere/x', which does not exist" \
  train --out "$tmp/dangling"
check "--steps: must be between 1 and 1000000000, got 0" train --steps 0 --out "$tmp/o"
check "--inject-jitter: expected jitter:J1" train --inject-jitter nope --out "$tmp/o"
check "--inject-jitter: expected jitter:J1, jitter:J2 or jitter:J3, got 'jitter:J2x'" train --inject-jitter jitter:J2x --out "$tmp/o"
check "--inject-jitter: 'jitter:J0' injects no jitter" train --inject-jitter jitter:J0 --out "$tmp/o"
check "--completion: expected poll, spin or callback, got 'nope'" train --completion nope --out "$tmp/o"
check "--completion: spin waits for a GPU's stream (--device cuda)" train --completion spin --out "$tmp/o"
check "--window: more than 1 keeps a GPU's stream fed (--device cuda)" train --window 2 --out "$tmp/o"
check "--max-len: 500 exceeds" train --max-len 500 --out "$tmp/o"
# Named as itself (it was --min-len's range that was given).
check "--max-len: must be between 1 and the model's --max-seq (128), got 0" train --max-len 0 --out "$tmp/o"
# The window's lengths not given follow those given: --max-seq 64 alone was refused as
# "--max-len: 128 exceeds the model's --max-seq 64", a value never given (here the refusal
# that remains is --steps').
check "--steps: must be between 1 and 1000000000, got 0" train --max-seq 64 --steps 0 --out "$tmp/o"
check "--steps: must be between 1 and 1000000000, got 0" train --max-len 16 --steps 0 --out "$tmp/o"
check "--max-len: 100 exceeds the model's --max-seq 64" train --max-seq 64 --max-len 100 --out "$tmp/o"
# An empty value after '=' took the next word for its value.
check "--data: '' names nothing; give a value (\`rrfp train --help\`" train --data= --out "$tmp/o"
check "--microbatches: must be at most 50 million chunk-microbatches, got 4 x 1 x 50000000 = 200000000" \
  train -m 50000000 --out "$tmp/o"
check "--tp: 3 does not divide --heads 4" train --tp 3 --out "$tmp/o"
# Read as 0, which turns each off: clipping and the watchdog.
check "--clip: '1e-400' is past a double's range, where it reads as 0 or infinity" train --clip 1e-400 --out "$tmp/o"
check "--timeout: '-1e-400' is past a double's range" train --timeout -1e-400 --out "$tmp/o"
check "--eval-every: '+3' is not a whole number (blanks and a '+' are not read" train --eval-every +3 --out "$tmp/o"
check "--tp-protocol: how the tensor-parallel ranks of a stage coordinate; at --tp 1" train --tp-protocol leader --out "$tmp/o"
check "--dp: data-parallel replicas run as processes" train --dp 2 --out "$tmp/o"
check "--transport: unknown transport 'tcp'" train --transport tcp --out "$tmp/o"
mkdir -p "$tmp/huge" && truncate -s 2G "$tmp/huge/a.txt"
check "the 1 file in '$tmp/huge' holds 2.0 GiB; the corpus is kept in memory and may hold at most 1.0 GiB" train --data "$tmp/huge" --out "$tmp/o"
check "--resume: '/dev/zero' is not a regular file" train --resume /dev/zero --out "$tmp/o"
# An empty path was taken as no resume: the run started afresh without a word.
check "--resume: '' names nothing; give a value (\`rrfp train --help\`" train --resume "" --out "$tmp/o"
check "--max-seq: must be between 1 and 1048576, got 2147483647" train --max-seq 2147483647 --out "$tmp/o"
check "for weights, gradients and optimizer state; this machine has" train --d-model 60000 --out "$tmp/o"
# The memory a run may take is core/memory.hpp's (RRFP_MEMORY_LIMIT here), not the machine's
# pages: the model, then its activations (a 16000-byte sequence over 16 heads asked LibTorch
# for 16 GB at once, and its failure printed 32 lines).
RRFP_MEMORY_LIMIT=64M check "--d-model 512 with --layers 4 (about 1.29e+07 parameters): about 207 MB of memory for weights, gradients and optimizer state; RRFP_MEMORY_LIMIT allows 67 MB: lower --d-model or --layers" \
  train --steps 1 --d-model 512 --heads 8 --out "$tmp/o"
# More chunks than blocks is said as such, before any memory check (--pp 50000 was refused as
# the activations' memory, naming every flag but --pp); a position table that is most of the
# model names --max-seq (it named --d-model and --layers alone).
check "--layers: the model has 4 blocks, fewer than the 50000 pipeline chunks" \
  train --steps 1 --d-model 32 --layers 4 --pp 50000 --out "$tmp/o"
RRFP_MEMORY_LIMIT=1G check "--d-model 2048 with --layers 1 and --max-seq 1048576 (about 2.2e+09 parameters): about 35.2 GB of memory for weights, gradients and optimizer state; RRFP_MEMORY_LIMIT allows 1.1 GB: lower --max-seq, --d-model or --layers" \
  train --steps 1 --pp 1 -m 1 --layers 1 --d-model 2048 --heads 4 --max-seq 1048576 --out "$tmp/o"
long=(--steps 1 --max-len 16000 --min-len 16000 --max-seq 16000 --heads 16 --d-model 64 --layers 1
  --pp 1 -m 1 --eval-batches 1 --out "$tmp/o")
RRFP_MEMORY_LIMIT=8G check "--max-len 16000 with --heads 16 and --layers 1: about 49.6 GB of memory for the activations of up to 1 microbatch in flight a stage" \
  train "${long[@]}"
RRFP_MEMORY_LIMIT=8G check "--max-images 2000 (29999 tokens) with --heads 16 and --layers 4" \
  train --task image-text --max-images 2000 --max-seq 30000 --heads 16 --steps 1 --out "$tmp/o"
# Microbatches in flight count: 4 stages of 8 a stage under --limit 8 hold 32 of them.
RRFP_MEMORY_LIMIT=1G check "for the activations of up to 8 microbatches in flight a stage" \
  train --steps 1 --max-len 1024 --min-len 1024 --max-seq 1024 --heads 8 -m 8 --limit 8 --out "$tmp/o"
# A fixed ZB-H2 order (a unit-cost greedy) defers most of a stage's weight gradients to its
# end: they count as the order holds them, not at the ready policy's cap (P = 2). Counted at
# the cap, ZB-H1's estimate (when it deferred them too) was 204 MB and the run took 1.5 GB of a
# 1 GB limit.
zb=(--pp 2 -m 24 --policy fixed --d-model 256 --heads 1 --max-len 512 --max-seq 512 --min-len 512
  --steps 1 --eval-batches 1 --warmup 0 --eval-every 0 --out "$tmp/o")
RRFP_MEMORY_LIMIT=400M check "about 981 MB of memory for the activations of up to 3 microbatches in flight a stage and 24 deferred weight gradients (attention keeps --heads x length^2 floats a block) and the model; RRFP_MEMORY_LIMIT allows 419 MB: lower --max-len, --heads, --layers or the microbatches in flight (under --policy ready, a --limit below the fixed order's 3)" \
  train "${zb[@]}" --hint zb-h2
# The step's batch and its tasks' records count: -m 20000000 (under the 50M cap) grew past 20 GB
# before its first task, or died of SIGSEGV (exit 139) in LibTorch under an address limit.
(ulimit -v 4000000 && exec timeout 120 "$rrfp" train --pp 2 -m 20000000 --steps 1 \
  --out "$tmp/o") >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
  grep -q "^rrfp: error: --microbatches 20000000: about .* of memory for the tokens and targets of a step's microbatches.*: lower --microbatches$" "$tmp/err" ||
  { echo "FAIL: train -m 20000000 -> rc=$rc: $(head -c 400 "$tmp/err")"; fails=$((fails + 1)); }
RRFP_MEMORY_LIMIT=1G "$rrfp" train --steps 1 --pp 2 -m 2 --d-model 16 --layers 2 --heads 2 \
  --eval-every 0 --eval-batches 1 --out "$tmp/fits" >/dev/null 2>"$tmp/err" ||
  { echo "FAIL: a small run under RRFP_MEMORY_LIMIT=1G: $(cat "$tmp/err")"; fails=$((fails + 1)); }
# An unknown task is named before --max-images (it was told "--max-images: images are the
# image-text task's; --task is image").
check "--task: expected text or image-text, got 'image'" train --task image --max-images 2 --out "$tmp/o"
check "--max-images 60: a sample can have 899 tokens, more than --max-seq 128" train --task image-text --max-images 60 --out "$tmp/o"
# At the largest --max-seq, raising it is no advice.
check "more than --max-seq 1048576 holds; lower --max-images" \
  train --task image-text --max-images 100000 --max-seq 1048576 --out "$tmp/o"
check "--seed: must not be negative" train --seed -3 --out "$tmp/o"
truncate -s 1G "$tmp/ckpt.bin"
check "is read for --resume" train --resume "$tmp/ckpt.bin" --out "$tmp/o"
# A checkpoint at step 2 resumed with --steps 1: one line (the warning that --steps differs
# came first and made it two).
small=(--d-model 16 --heads 2 --layers 4 --max-seq 32 --max-len 32 --min-len 8 --eval-every 0)
"$rrfp" train "${small[@]}" --steps 2 --save-every 2 --out "$tmp/ck2" >/dev/null 2>&1
# The banner states the tensor-parallel size and protocol (a TP=2 run's read as a TP=1 run's).
"$rrfp" train "${small[@]}" --steps 1 --warmup 0 --tp 2 --tp-protocol agree --out "$tmp/tp2" \
  2>/dev/null | grep -q "^rrfp train: P=4 V=1 (loop) M=8 TP=2 (agree) ready bfw" ||
  { echo "FAIL: the banner of a TP=2 run"; fails=$((fails + 1)); }
# A fixed list's ranks run no protocol: its banner said "TP=2 (agree) fixed 1f1b".
"$rrfp" train "${small[@]}" --steps 1 --warmup 0 --tp 2 --tp-protocol agree --policy fixed \
  --hint 1f1b --out "$tmp/tp2f" 2>/dev/null |
  grep -q "^rrfp train: P=4 V=1 (loop) M=8 TP=2 (fixed list: no coordination) fixed 1f1b" ||
  { echo "FAIL: the banner of a fixed TP=2 run"; fails=$((fails + 1)); }
check "--resume: the checkpoint is already at step 2 of --steps 1" train "${small[@]}" \
  --steps 1 --resume "$tmp/ck2/checkpoint.bin" --out "$tmp/ck2"
# Into a new --out, past --steps or at it (no log there holds a validation to fill in): refused
# before the folder is made (it was left holding the lock file alone).
for n in 1 2; do
  check "--resume: the checkpoint is already at step 2 of --steps $n" train "${small[@]}" \
    --steps $n --resume "$tmp/ck2/checkpoint.bin" --out "$tmp/new$n"
  [ -e "$tmp/new$n" ] && { echo "FAIL: a resume at its end made --out"; fails=$((fails + 1)); }
done
# A checkpoint refused (here cut short) leaves no --out behind: it was made, holding the lock
# file alone, before the checkpoint was read.
head -c 4000 "$tmp/ck2/checkpoint.bin" >"$tmp/cut.bin"
check "--resume: '$tmp/cut.bin'" train "${small[@]}" --steps 3 --resume "$tmp/cut.bin" \
  --out "$tmp/never"
[ -e "$tmp/never" ] && { echo "FAIL: a refused checkpoint left --out behind"; fails=$((fails + 1)); }
# A log that is a symbolic link stays one when a resume rewrites it (the link was replaced by
# the file, and the rows went on in --out, not where the link pointed).
cp -r "$tmp/ck2" "$tmp/ck2l" && mv "$tmp/ck2l/loss.csv" "$tmp/linked.csv"
ln -s "$tmp/linked.csv" "$tmp/ck2l/loss.csv"
"$rrfp" train "${small[@]}" --steps 3 --resume "$tmp/ck2l/checkpoint.bin" --out "$tmp/ck2l" \
  >/dev/null 2>&1 && [ -L "$tmp/ck2l/loss.csv" ] && [ "$(wc -l <"$tmp/linked.csv")" -eq 4 ] ||
  { echo "FAIL: a resume replaced the linked loss.csv"; fails=$((fails + 1)); }
# Under a millisecond the watchdog took 1 ms and named a --timeout of 0.001 never given.
check "--timeout: must be 0 (no limit) or at least 0.001 seconds" train --timeout 0.0001 --out "$tmp/o"

# A fresh run into that folder would write its logs beside the earlier run's checkpoint, and
# a resume from it would splice the two runs' steps in one log.
check "--out: '$tmp/ck2' holds checkpoint.bin of an earlier run; pass --resume" \
  train "${small[@]}" --steps 2 --out "$tmp/ck2"
# A resume into a folder holding another checkpoint would replace it without a word; without
# --save-every it writes none, but its logs beside it.
mkdir -p "$tmp/other" && cp "$tmp/ck2/checkpoint.bin" "$tmp/other/checkpoint.bin"
check "--out: '$tmp/ck2' holds a checkpoint.bin other than --resume ('$tmp/other/checkpoint.bin'), which the run would replace" \
  train "${small[@]}" --steps 3 --save-every 1 --resume "$tmp/other/checkpoint.bin" --out "$tmp/ck2"
check "--out: '$tmp/ck2' holds a checkpoint.bin other than --resume ('$tmp/other/checkpoint.bin'), beside which the run would write its logs" \
  train "${small[@]}" --steps 3 --resume "$tmp/other/checkpoint.bin" --out "$tmp/ck2"
check "--inject-jitter: '' names nothing; give a value" train --inject-jitter "" --out "$tmp/o"
# The run's outputs are none of its inputs: a hint file at OUT/durations.csv was replaced by
# the run's, and an `out` that is the corpus folder put the run's files into the next run's
# corpus (a subfolder is not read, and passes).
mkdir -p "$tmp/corpus" && printf 'some text for the corpus\n' >"$tmp/corpus/a.txt"
check "--out: '$tmp/corpus' is the corpus folder --data" train --data "$tmp/corpus" --out "$tmp/corpus"
check "is the corpus folder --data ('$tmp/corpus/.'): the run's files" train --data "$tmp/corpus/." --out "$tmp/corpus/"
[ "$(ls "$tmp/corpus")" = a.txt ] || { echo "FAIL: a refused run wrote into the corpus"; fails=$((fails + 1)); }
mkdir -p "$tmp/hd" && "$rrfp" schedule show --pp 4 -m 8 --hint zb-h1 --out "$tmp/hd/durations.csv" >/dev/null
check "--out: '$tmp/hd/durations.csv' is the hint file --hint the run reads" train --hint "$tmp/hd/durations.csv" --out "$tmp/hd"
# A number flag given '' was 0: --save-every "" saved nothing, --timeout "" had no watchdog.
check "--save-every: '' is not a whole number (rrfp train --help says what it takes)" train --save-every "" --out "$tmp/o"
check "--timeout: '' is not a number" train --timeout "" --out "$tmp/o"
check "--lr: must be in [1e-30, 1000], got nan" train --lr nan --out "$tmp/o"
check "--lr: must be in [1e-30, 1000], got 1e+300" train --lr 1e300 --out "$tmp/o"
# 1e-300 is 0 as the optimizer's float: the run trained nothing without a word.
check "--lr: must be in [1e-30, 1000], got 1e-300" train --lr 1e-300 --out "$tmp/o"
check "--weight-decay: must be in [0, 1000], got 1e+300" train --weight-decay 1e300 --out "$tmp/o"
# A value just past a bound is said with the digits that show it (%g said "got 1000").
check "--lr: must be in [1e-30, 1000], got 1000.0001" train --lr 1000.0001 --out "$tmp/o"
# Each step multiplies every weight by 1 - lr x weight decay: from 1 on it flipped them all, and
# the run diverged a few steps later.
check "--lr x --weight-decay: must be below 1 (each step multiplies every weight by 1 minus their product), got 20 x 0.05" \
  train --lr 20 --weight-decay 0.05 --out "$tmp/o"
check "--timeout: must be between 0 and 86400 seconds, got 86400.0001" train --timeout 86400.0001 --out "$tmp/o"
check "--clip: must be a finite number of at least 0, got -1" train --clip -1 --out "$tmp/o"
check "--eval-batches: must be between 1 and 1000000, got 0" train --eval-batches 0 --out "$tmp/o"
# Unbounded, 2^31 - 1 started a validation that never ended.
check "--eval-batches: must be between 1 and 1000000, got 2147483647" train --eval-batches 2147483647 --out "$tmp/o"
check "--eval-every: must be at least 0, got -1" train --eval-every -1 --out "$tmp/o"
check "--limit: must be 0 (default) or at least 1, got -2" train --limit -2 --out "$tmp/o"
check "--max-pending-w: must be 0 (default) or at least 1, got -1" train --max-pending-w -1 --out "$tmp/o"
check "--policy: unknown policy 'both'" train --policy both --out "$tmp/o"
check "--policy: unknown policy 'rrfp' (expected fixed or ready)" train --policy rrfp --out "$tmp/o"
# No W tasks to cap where the backward is not split (it was taken and ignored); bfw, the
# default hint, needs the split and says so first.
check "--max-pending-w: caps the deferred W tasks of a split backward; --split-backward off" train --hint bf --split-backward off --max-pending-w 2 --out "$tmp/o"
check "--hint bfw: needs --split-backward on" train --split-backward off --max-pending-w 2 --out "$tmp/o"
check "--max-pending-w: caps the deferred W tasks of a split backward; --split-backward off" train --hint adaptive --split-backward off --max-pending-w 2 --out "$tmp/o"
check "--max-pending-w: caps the deferred W tasks of a split backward; --split-backward auto" train --hint bf --max-pending-w 2 --out "$tmp/o"
# Flags that would be taken and ignored: images in the text task, the GPU's deterministic
# switch on the CPU (the other CUDA-only flags were refused already).
check "--max-images: images are the image-text task's; --task is text" train --max-images 2 --out "$tmp/o"
check "--data: the text task's corpus and its windows; --task is image-text" train --task image-text --data /nonexistent --out "$tmp/o"
check "--min-len: the text task's corpus and its windows; --task is image-text" train --task image-text --min-len 60 --out "$tmp/o"
check "--max-len: the text task's corpus and its windows; --task is image-text" train --task image-text --max-len 64 --out "$tmp/o"
check "--deterministic: off trades a GPU's bitwise results for speed (--device cuda)" train --deterministic off --out "$tmp/o"
# Training's own files in --out: a FIFO there is refused before the first step (exit 2, as a
# directory there is) in a line, at once, whether a reader holds it or not; a second run on a
# folder in use is refused (exit 2).
small=(--steps 2 --pp 2 -m 2 --d-model 16 --layers 2 --heads 2 --eval-every 0)
for f in loss.csv checkpoint.bin.tmp; do
  rm -rf "$tmp/fo" && mkdir "$tmp/fo" && mkfifo "$tmp/fo/$f"
  timeout 60 "$rrfp" train "${small[@]}" --save-every 1 --out "$tmp/fo" >/dev/null 2>"$tmp/fo.err"
  rc=$?
  [ $rc -eq 2 ] && grep -Eq "$f' is a FIFO, not a file" "$tmp/fo.err" ||
    { echo "FAIL: train with $f a FIFO -> rc=$rc"; cat "$tmp/fo.err"; fails=$((fails + 1)); }
done
rm -rf "$tmp/lk" && mkdir "$tmp/lk"
"$rrfp" train --steps 100000 --pp 2 -m 2 --d-model 16 --layers 2 --heads 2 --eval-every 0 \
  --out "$tmp/lk" >/dev/null 2>&1 &
first=$!
# Up to a minute for its first row (LibTorch's start on a busy machine), then said if it never came.
for _ in $(seq 600); do [ -s "$tmp/lk/loss.csv" ] && break; sleep 0.1; done
[ -s "$tmp/lk/loss.csv" ] || { echo "FAIL: the holding run wrote no row in 60 s"; fails=$((fails + 1)); }
check "--out: '$tmp/lk' is in use by another rrfp train" train "${small[@]}" --out "$tmp/lk"
kill -9 $first
wait $first 2>/dev/null
# A directory where the run writes a file at its end: refused before the steps (the run
# trained every step first, then failed naming --trace, a flag train does not have).
rm -rf "$tmp/od" && mkdir -p "$tmp/od/trace.json"
check "--out: '$tmp/od/trace.json' is a directory, not a file" train "${small[@]}" --out "$tmp/od"
[ ! -e "$tmp/od/loss.csv" ] || { echo "FAIL: a step ran before the refusal"; fails=$((fails + 1)); }
# So is one at the checkpoint's temporary, met at the first save (the steps before it lost).
rm -rf "$tmp/ot" && mkdir -p "$tmp/ot/checkpoint.bin.tmp"
check "--out: '$tmp/ot/checkpoint.bin.tmp' is a directory, not a file" \
  train "${small[@]}" --save-every 1 --out "$tmp/ot"
[ ! -e "$tmp/ot/loss.csv" ] || { echo "FAIL: a step ran before the temporary's refusal"; fails=$((fails + 1)); }
# A refused input leaves no `out` behind (a bad --hint, --data or --resume made an empty one).
for bad in "--hint $tmp/no-hint.txt" "--data $tmp/no-data" "--resume $tmp/no-checkpoint.bin"; do
  # shellcheck disable=SC2086  # the flag and its value, split
  "$rrfp" train $bad --out "$tmp/never" >/dev/null 2>&1
  [ $? -eq 2 ] && [ ! -e "$tmp/never" ] || { echo "FAIL: train $bad made --out"; fails=$((fails + 1)); }
done
check "--resume: '$tmp/no-checkpoint.bin' does not exist" train --resume "$tmp/no-checkpoint.bin" --out "$tmp/o"
# An `out` through `..` of a folder it makes, refused: that folder is removed too (it was left).
touch "$tmp/plain"
check "--out: cannot write to directory '$tmp/nx/../plain/run': File exists" train --steps 1 \
  --out "$tmp/nx/../plain/run"
[ ! -e "$tmp/nx" ] || { echo "FAIL: a refused --out through nx/.. left nx"; fails=$((fails + 1)); }
# What no estimate foresees, an allocation LibTorch refuses (here under an address-space limit
# below the 1 GB of one attention's scores), ends the run in one line: its C++ stack frames
# followed it, 32 lines in all. (A machine with under 3 GB available refuses it up front.)
mkdir -p "$tmp/long" && head -c 540000 /dev/zero | tr '\0' 'a' >"$tmp/long/doc.txt"
if (ulimit -v 2000000 && "$rrfp" --help >/dev/null 2>&1); then
  (ulimit -v 2000000 && timeout 120 "$rrfp" train --steps 1 --warmup 0 --max-len 4000 \
    --min-len 4000 --max-seq 4000 --heads 16 --d-model 64 --layers 1 --pp 1 -m 1 \
    --eval-every 0 --eval-batches 1 --data "$tmp/long" --out "$tmp/oom" >/dev/null 2>"$tmp/oom.err")
  rc=$?
  if ! { [ $rc -eq 1 ] && grep -q "you tried to allocate" "$tmp/oom.err" ||
    { [ $rc -eq 2 ] && grep -q "of memory for the activations" "$tmp/oom.err"; }; } ||
    [ "$(wc -l <"$tmp/oom.err")" -ne 1 ]; then
    echo "FAIL: train under a 2 GB address limit -> rc=$rc: $(head -c 600 "$tmp/oom.err")"
    fails=$((fails + 1))
  fi
fi
# OMP_NUM_THREADS past any machine: named (OpenMP failed the run mid-step in its own words).
OMP_NUM_THREADS=99999999 check "OMP_NUM_THREADS: '99999999' is no thread count (1 to 4096" \
  train --steps 1 --out "$tmp/o"
OMP_NUM_THREADS=4,99999999 check "OMP_NUM_THREADS: '4,99999999' is no thread count" train --steps 1 \
  --out "$tmp/o"
# A value OpenMP itself refuses: refused before rrfp-train starts, whose OpenMP printed its own
# lines as it loaded (three lines on stderr).
OMP_NUM_THREADS=0 check "OMP_NUM_THREADS: '0' is no thread count" train --steps 1 --out "$tmp/o"
# OUT/checkpoint.bin a loop of links: refused naming `out` (an internal error, exit 1), and an
# `out` the refused run made is gone again (it was left empty).
mkdir -p "$tmp/lp" && ln -s A "$tmp/lp/B" && ln -s B "$tmp/lp/A" && ln -s A "$tmp/lp/checkpoint.bin"
check "--out: cannot look at '$tmp/lp/checkpoint.bin': Too many levels of symbolic links" \
  train --steps 1 --out "$tmp/lp"
ln -s loop2 "$tmp/loop1" && ln -s loop1 "$tmp/loop2"
check "--out: '$tmp/loop1' is a symbolic link to 'loop2', which cannot be followed (Too many levels" \
  train --steps 1 --out "$tmp/loop1"
# No thread can be started (ulimit -u 1, as a user it binds: root it does not): the run fails
# in a line naming the limit (it sat silent in LibTorch's thread pool for ever).
as_user=()
[ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null &&
  as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
if [ "$(id -u)" -ne 0 ] || [ ${#as_user[@]} -gt 0 ]; then
  free=$(mktemp -d) && chmod 777 "$free"
  timeout 60 "${as_user[@]}" bash -c 'ulimit -u 1; exec "$0" "$@"' "$rrfp" train --steps 1 \
    --out "$free/o" >/dev/null 2>"$tmp/threads.err"
  rc=$?
  if [ $rc -ne 1 ] || ! tail -1 "$tmp/threads.err" | grep -q "run failed: could not start \
LibTorch's [0-9]* pool threads (.*): this machine's thread or memory limit"; then
    echo "FAIL: train under ulimit -u 1 -> rc=$rc: $(head -c 400 "$tmp/threads.err")"
    fails=$((fails + 1))
  fi
  # An `out` of new folders that cannot be written (umask 777): refused, and every folder the
  # run made is gone again (it left the first, mode 000).
  timeout 60 "${as_user[@]}" bash -c 'umask 777; exec "$0" "$@"' "$rrfp" train --steps 1 \
    --out "$free/n1/n2/n3" >/dev/null 2>"$tmp/umask.err"
  rc=$?
  if [ $rc -ne 2 ] || [ -e "$free/n1" ] ||
    ! grep -q "^rrfp: error: --out: cannot write to directory '$free/n1/n2/n3': Permission" \
      "$tmp/umask.err"; then
    echo "FAIL: train --out of new folders under umask 777 -> rc=$rc, left: $(ls "$free"), \
$(head -c 300 "$tmp/umask.err")"
    fails=$((fails + 1))
  fi
  rm -rf "$free"
fi
echo "cli bad-train-input checks: $fails failed"
[ "$fails" -eq 0 ]
