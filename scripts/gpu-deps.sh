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
rm -rf "$dest"
mkdir -p "$dest/debs" "$dest/root"
(cd "$dest/debs" && apt-get download nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev \
  googletest zlib1g-dev >/dev/null)
for f in "$dest"/debs/*.deb; do dpkg -x "$f" "$dest/root"; done
rm -rf "$dest/debs" "$dest/root/usr/share/doc" "$dest/root/usr/src"
# zlib's shared library is the GPU machine's own; keep its headers and the static archive.
rm -f "$dest"/root/usr/lib/x86_64-linux-gnu/libz.so
cp -r /usr/share/common-licenses "$dest/corpus"
du -sh "$dest"
