#!/usr/bin/env python3
"""Loss curves and more from train_gpt's --metrics files (JSON lines), one PNG.

    python3 scripts/plot_metrics.py run.jsonl [other.jsonl ...] [--out curves.png]

Panels: training loss and validation loss over steps; tokens/s; memory per category on the
writing rank (parameters, gradients, optimizer states, activations, communication buffers) at
the end of each step. Several files are overlaid, labelled by file name, e.g. two ZeRO stages or
a resumed run's two halves. Lines a crash cut short are skipped with a warning. Bad input (a
missing, unreadable or non-metrics file, nothing to draw, an output that cannot be written)
exits 2 with one line on stderr. Needs matplotlib (python3-matplotlib; scripts/setup.sh).
"""
import argparse
import json
import os
import sys

MEMORY = ["param", "grad", "optim", "activation", "comm"]


def fail(message):
    """Bad input: one line on stderr and exit status 2, never a traceback."""
    print(f"plot_metrics: {message}", file=sys.stderr)
    sys.exit(2)


def is_number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def usable(j, value):
    """A step or eval line as drawn: `step` and `value` numbers; tokens/s and memory values that
    are not numbers (or a `mem` that is not an object) are left out rather than drawn."""
    if not (is_number(j.get("step")) and is_number(j.get(value))):
        return None
    mem = j.get("mem")
    return dict(j, tokens_per_s=j["tokens_per_s"] if is_number(j.get("tokens_per_s")) else None,
                mem={k: v for k, v in mem.items() if is_number(v)} if isinstance(mem, dict) else {})


def read(path):
    """The step and eval lines of a metrics file, and the numbers of the lines that are not JSON
    objects (a line a crash cut short) or whose step, loss or val_loss is not a number. Raises
    OSError if the file cannot be read."""
    steps, evals, skipped = [], [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            try:
                j = json.loads(line)
            except ValueError:
                j = None
            if not isinstance(j, dict):
                if line.strip():
                    skipped.append(n)
                continue
            kind = "loss" if "loss" in j and "step" in j else "val_loss" if "val_loss" in j and "step" in j else None
            if kind is None:
                continue
            line_used = usable(j, kind)
            if line_used is None:
                skipped.append(n)
            else:
                (steps if kind == "loss" else evals).append(line_used)
    return steps, evals, skipped


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", help="metrics files written by train_gpt --metrics")
    ap.add_argument("--out", default="curves.png", help="the PNG to write (default curves.png)")
    a = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_metrics: needs matplotlib (apt-get install python3-matplotlib)")
    runs = []
    for path in a.files:
        try:
            steps, evals, skipped = read(path)
        except OSError as e:
            fail(f"cannot read {path}: {e.strerror or e}")
        if not steps:
            fail(f"{path} has no step lines, nothing to draw (is it a train_gpt --metrics file?)")
        if skipped:
            where = f"line {skipped[0]}" if len(skipped) == 1 else f"{len(skipped)} lines from line {skipped[0]}"
            print(f"plot_metrics: warning: {path}: skipped {where}, not complete JSON (cut short by a crash?) "
                  "or with a step, loss or val_loss that is not a number", file=sys.stderr)
        runs.append((os.path.basename(path), steps, evals))

    fig, (ax_loss, ax_tok, ax_mem) = plt.subplots(1, 3, figsize=(15, 4.2))
    for name, steps, evals in runs:
        line, = ax_loss.plot([s["step"] for s in steps], [s["loss"] for s in steps], lw=1, label=f"{name} train")
        if evals:
            ax_loss.plot([e["step"] for e in evals], [e["val_loss"] for e in evals], "o--", color=line.get_color(),
                         label=f"{name} val")
        ax_tok.plot([s["step"] for s in steps], [s["tokens_per_s"] or 0 for s in steps], lw=1, label=name)
        for k in MEMORY:
            values = [s["mem"].get(k) for s in steps]
            if any(v for v in values):
                ax_mem.plot([s["step"] for s in steps], [(v or 0) / 2**20 for v in values], lw=1,
                            label=f"{name} {k}" if len(runs) > 1 else k)
    ax_loss.set(title="loss (nats/token)", xlabel="step")
    ax_tok.set(title="tokens/s", xlabel="step")
    ax_mem.set(title="memory per rank after the step (MiB)", xlabel="step")
    for ax in (ax_loss, ax_tok, ax_mem):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(a.out, dpi=110, bbox_inches="tight")
    except (OSError, ValueError) as e:  # a missing directory, no permission, an unknown image format
        fail(f"cannot write {a.out}: {getattr(e, 'strerror', None) or e}")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
