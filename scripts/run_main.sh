#!/usr/bin/env bash
# The main command (README): set up, build, run the main job.
# Until the GPT issue lands, the main job is the autograd demo.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
bash scripts/build.sh "$root/build"
"$root/build/examples/autograd_demo"
