# Reading the benchmarks' one-line results ("zerodl params=... step_ms=... tokens_per_s=..."),
# sourced by bench/run_*.sh: field LINE KEY prints KEY's value; shape_label FLAGS turns shape
# flags ("--layers 4 --heads 4 --embd 256 ...") into a table label ("L4 H4 C256 ...").
field() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
shape_label() {
  echo "$1" | awk '{ for (i = 1; i < NF; i += 2) { k = $i; sub(/^--/, "", k)
    l = l sprintf("%s%s ", (k == "layers" ? "L" : k == "heads" ? "H" : k == "embd" ? "C" : k == "seq" ? "T" : k == "batch" ? "B" : k "="), $(i + 1)) }
    print l }'
}
