#!/usr/bin/env bash
# Fetches the header-only cuDNN frontend (NVIDIA's C++ graph API over cuDNN, PyPI package
# nvidia-cudnn-frontend) into third_party/cudnn_frontend/include (git-ignored), where
# cmake/ZdlCudnn.cmake finds it for cuDNN attention. Run by scripts/setup.sh when a CUDA
# toolkit is present. Never fails: without pip or a network it says so, and the CUDA build
# goes on without cuDNN attention. Quick when the headers of this version are already there.
#   ZDL_CUDNN_FRONTEND_VERSION   the version (default 1.32.0, the one zerodl is built against)
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version="${ZDL_CUDNN_FRONTEND_VERSION:-1.32.0}"
dest="$root/third_party/cudnn_frontend"

have="$(awk '/#define CUDNN_FRONTEND_(MAJOR|MINOR|PATCH)_VERSION /{printf "%s%s", s, $3; s="."}' \
        "$dest/include/cudnn_frontend_version.h" 2>/dev/null)"
if [ "$have" = "$version" ]; then
  echo "setup: cuDNN frontend $version present ($dest)"
  exit 0
fi
skip() {
  echo "setup: cuDNN frontend $version not fetched ($*);"
  echo "       without one in $dest, the CUDA build runs attention on zerodl's kernels"
  exit 0
}
python3 -m pip --version >/dev/null 2>&1 || skip "python3 -m pip is missing"

tmp="$(mktemp -d /tmp/zdl_cudnn_frontend.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
echo "setup: fetching nvidia-cudnn-frontend==$version (headers only)"
# Any one of its wheels holds the same headers: ask for a fixed Linux x86-64 CPython one, so the
# local interpreter's version does not matter, and never an sdist (it would build).
timeout 180 python3 -m pip download -q --no-deps --only-binary=:all: --retries 1 --timeout 20 \
    --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$tmp" "nvidia-cudnn-frontend==$version" >"$tmp/pip.log" 2>&1 ||
  skip "pip download failed, no network? $(tail -n 1 "$tmp/pip.log")"
wheel="$(ls "$tmp"/nvidia_cudnn_frontend-*.whl 2>/dev/null | head -1)"
[ -n "$wheel" ] || skip "pip downloaded no wheel"
# The wheel's include/ and licenses, swapped in whole so a failure leaves the old folder.
python3 - "$wheel" "$tmp/out" <<'EOF' || skip "could not unpack $(basename "$wheel")"
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for n in z.namelist():
        if n.startswith("include/") or "/licenses/" in n:
            z.extract(n, sys.argv[2])
EOF
[ -f "$tmp/out/include/cudnn_frontend.h" ] || skip "no cudnn_frontend.h in $(basename "$wheel")"
mkdir -p "$tmp/out/licenses" && cp "$tmp"/out/*.dist-info/licenses/* "$tmp/out/licenses/" 2>/dev/null
rm -rf "$tmp"/out/*.dist-info
mkdir -p "$root/third_party"
{ rm -rf "$dest.old" && { [ ! -e "$dest" ] || mv "$dest" "$dest.old"; } && mv "$tmp/out" "$dest" && rm -rf "$dest.old"; } ||
  skip "could not put it in $dest"
echo "setup: cuDNN frontend $version in $dest"
