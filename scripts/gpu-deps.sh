#!/usr/bin/env bash
# Prepares, on a Debian 12 machine, what the GPU build needs and a GPU machine lacks: the
# header-only and test libraries rrfp builds with (nlohmann-json, CLI11, GoogleTest, zlib's
# headers), unpacked from Debian's own packages into .gpu-deps/root, and the licence texts
# `rrfp train` reads by default, into .gpu-deps/corpus. Nothing is downloaded on the GPU machine:
# carry .gpu-deps there with the source tree, then run scripts/build-gpu.sh.
# Usage: scripts/gpu-deps.sh        (about 6 MB; needs apt-get download, no root)
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.gpu-deps
# Made beside it and put in its place only once whole: a .gpu-deps carried here was removed
# first, and a download that failed (a GPU machine with apt but no network) left it gone.
work=$(mktemp -d .gpu-deps.new.XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"  # as mkdir made it: mktemp's 700 kept another user of the carried tree out
mkdir -p "$work/debs" "$work/root"
(cd "$work/debs" && apt-get download nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev \
  googletest zlib1g-dev >/dev/null) || {
  echo "$0: apt-get download failed (above); $dest is left as it was" >&2
  exit 1
}
for f in "$work"/debs/*.deb; do dpkg -x "$f" "$work/root"; done
rm -rf "$work/debs" "$work/root/usr/share/doc" "$work/root/usr/src"
# zlib's shared library is the GPU machine's own; keep its headers and the static archive.
rm -f "$work"/root/usr/lib/x86_64-linux-gnu/libz.so
cp -r /usr/share/common-licenses "$work/corpus"
rm -rf "$dest"
mv "$work" "$dest"
du -sh "$dest"
