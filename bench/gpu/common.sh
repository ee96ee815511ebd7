# Sourced by the GPT-2 benchmarks in bench/gpu/ after setting NAME (the script's name, for its
# messages): resolves the build ($1, default build-gpu) and its train_gpt ($exe), exits 0 with a
# line when no GPU is visible (nothing to measure) and 1 when train_gpt is missing, makes a work
# folder removed at exit ($work) holding 16 MiB of random bytes ($work/data.bin: the speed does
# not depend on which ids they are), and defines GPT2 (GPT-2 124M's train_gpt flags, vocabulary
# 50257 padded to 50304) and step_row (a metrics file's timed steps as one table row).
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-$root/build-gpu}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
exe="$build/examples/train_gpt"
PY="${PYTHON:-python3}"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then
  echo "$NAME: no GPU visible (nvidia-smi lists none): nothing measured"
  exit 0
fi
if [ ! -x "$exe" ]; then
  echo "$NAME: no $exe (build it: cmake --build $build --target train_gpt)"
  exit 1
fi
work="$(mktemp -d "/tmp/zdl_$NAME.XXXXXX")"
trap 'rm -rf "$work"' EXIT
"$PY" -c "import os; open('$work/data.bin', 'wb').write(os.urandom(16 << 20))" ||
  head -c $((16 << 20)) /dev/urandom >"$work/data.bin"
GPT2=(--n-layer 12 --n-head 12 --n-embd 768 --seq 1024 --vocab-size 50257 --vocab-multiple 128)

# step_row METRICS WARMUP LABEL...: "LABEL... step_ms tokens/s peak_GiB" over the steps after the
# warm-up (the peak from the GPU's memory ledger, over every step).
step_row() {
  "$PY" - "$@" <<'PY'
import json, sys
path, warm, labels = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
steps = [j for j in map(json.loads, open(path)) if "tokens_per_s" in j]
timed = [j for j in steps if j["step"] > warm]
ms = sum(j["ms"] for j in timed) / len(timed)
tps = sum(j["tokens_per_s"] for j in timed) / len(timed)
cells = " ".join(f"{l:<8}" for l in labels)
print(f"{cells} {ms:9.1f} {tps:10.0f} {max(j['mem']['peak'] for j in steps) / 2**30:9.2f}")
PY
}
