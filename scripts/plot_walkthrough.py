#!/usr/bin/env python3
"""Pictures of the ZeRO walkthrough (docs/walkthrough.md), drawn from zero_walkthrough's CSVs.

    python3 scripts/plot_walkthrough.py --run build          # run N = 1, 2, 4, 8, then draw
    python3 scripts/plot_walkthrough.py --out walkthrough_out  # draw from CSVs already there

--run BUILD_DIR runs `mpirun -np N BUILD_DIR/examples/zero_walkthrough --out OUT` for every N of
--ranks (one OpenMP thread per rank, as ranks share the cores), saves each run's printout as
OUT/walkthrough_n<N>.txt, and stops if a run's checks fail. Then it writes four PNGs to OUT:

  memory_by_stage.png   per-rank memory by category, each stage, each N (stacked bars)
  zero3_memory_step.png memory over one step on rank 0: ZeRO-3's gather/free sawtooth vs DDP
  zero3_timeline.png    compute and communication per unit over one ZeRO-3 step, with and
                        without prefetch (which all-gather overlaps which unit's compute)
  largest_model.png     the largest GPT that trains under the per-rank memory cap, per stage, vs N,
                        without and with activation checkpointing

Every number comes from the CSVs (measured on rank 0, which the example checks equals every
rank); nothing is extrapolated here. Needs matplotlib (python3-matplotlib; scripts/setup.sh).
"""
import argparse
import csv
import glob
import os
import re
import subprocess
import sys
import time

STAGES = ["ddp", "zero1", "zero2", "zero3"]
TITLES = {"ddp": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3"}
STAGE_COLORS = {"ddp": "#444444", "zero1": "#1f77b4", "zero2": "#2ca02c", "zero3": "#d62728"}
# Bar segments: (label, color, hatch, value from the memory CSV's rows by category). The model
# states after the step (what stays), then what exists only during the step, at its peak.
SEGMENTS = [
    ("parameters", "#4c72b0", None, lambda r: int(r["param"]["after"])),
    ("gradients", "#55a868", None, lambda r: int(r["grad"]["after"])),
    ("optimizer states", "#c44e52", None, lambda r: int(r["optim"]["after"])),
    ("gathered unit parameters (peak in step)", "#a6bddb", "..",
     lambda r: int(r["param"]["peak"]) - int(r["param"]["after"])),
    ("full unit gradients (peak in step)", "#b8e0b0", "..",
     lambda r: int(r["grad"]["peak"]) - int(r["grad"]["after"])),
    ("activations (peak in step)", "#dd8452", "//", lambda r: int(r["activation"]["peak"])),
    ("comm buffers (peak in step)", "#8172b3", "xx", lambda r: int(r["comm"]["peak"])),
]
MIB = 1024.0 * 1024.0


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def fail(message):
    """Bad input: one line on stderr and exit status 2, never a traceback."""
    print(f"plot_walkthrough: {message}", file=sys.stderr)
    sys.exit(2)


def by_n(out, name):
    """{N: rows} for every OUT/<name>_n<N>.csv."""
    found = {}
    for p in glob.glob(os.path.join(out, f"{name}_n*.csv")):
        m = re.search(r"_n(\d+)\.csv$", p)
        if m:
            rows = read_csv(p)
            if not rows:
                fail(f"{p} holds no rows (not a zero_walkthrough CSV, or a run cut short): rerun, or remove it")
            found[int(m.group(1))] = rows
    return dict(sorted(found.items()))


def check_one_run(out):
    """The CSVs of every N must come from runs of one model and dtype (and one memory cap): each
    run replaces its own N's files, but files of other N from an earlier run with other flags
    stay in OUT, and drawn together they would mix two models in one picture."""
    for name, keys in (("memory", ("psi", "dtype")), ("fit", ("cap", "dtype"))):
        seen = {}
        for n, rows in by_n(out, name).items():
            missing = [k for k in keys if k not in rows[0]]
            if missing:
                fail(f"{out}/{name}_n{n}.csv has no column '{missing[0]}': not a zero_walkthrough CSV of this version")
            seen[n] = tuple(rows[0][k] for k in keys)
        if len(set(seen.values())) > 1:
            what = ", ".join(f"N={n}: {'/'.join(f'{k} {v}' for k, v in zip(keys, vals))}" for n, vals in seen.items())
            fail(f"the {name} CSVs in {out} come from different runs ({what}): rerun every N with the same flags "
                 f"(--run), or draw from another --out")


def run_all(build, out, ranks, extra):
    exe = os.path.join(build, "examples", "zero_walkthrough")
    if not os.path.exists(exe):
        sys.exit(f"plot_walkthrough: no {exe}; build it first (bash scripts/build.sh {build})")
    if os.path.exists(out) and not os.path.isdir(out):
        fail(f"--out {out} is a file, not a directory")
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ)  # the example gives each rank its share of the cores
    # OpenMPI refuses root and oversubscription unless told; MPICH ignores these.
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    for n in ranks:
        cmd = ["mpirun", "-np", str(n), exe, "--out", out] + extra
        t = time.time()
        print(f"plot_walkthrough: {' '.join(cmd)}", flush=True)
        res = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        with open(os.path.join(out, f"walkthrough_n{n}.txt"), "w") as f:
            f.write(res.stdout)
        print(f"  N={n}: exit {res.returncode} in {time.time() - t:.1f} s "
              f"(printout: {out}/walkthrough_n{n}.txt)", flush=True)
        if res.returncode != 0:
            sys.stdout.write(res.stdout[-3000:])
            sys.exit(f"plot_walkthrough: the N={n} run failed")


def mib_formatter(plt):
    return plt.FuncFormatter(lambda v, _: f"{v:g}")


# ---- (1) memory by category, stage and N ----
def plot_memory(out, plt):
    data = by_n(out, "memory")
    if not data:
        return None
    ns = list(data)
    fig, axes = plt.subplots(1, len(ns), figsize=(3.2 * len(ns) + 1.5, 4.8), sharey=True, squeeze=False)
    axes = axes[0]
    dtype = "?"
    for ax, n in zip(axes, ns):
        rows = {(r["stage"], r["category"]): r for r in data[n]}
        dtype = data[n][0]["dtype"]
        xs = range(len(STAGES))
        bottom = [0.0] * len(STAGES)
        for label, color, hatch, value in SEGMENTS:
            vals = [value({c: rows[(s, c)] for c in ("param", "grad", "optim", "activation", "comm")}) / MIB
                    for s in STAGES]
            ax.bar(xs, vals, bottom=bottom, color=color, hatch=hatch, edgecolor="white", linewidth=0.5,
                   label=label)
            bottom = [b + v for b, v in zip(bottom, vals)]
        peaks = [int(rows[(s, "total")]["peak"]) / MIB for s in STAGES]
        formula = [float(rows[(s, "total")]["paper"]) / MIB for s in STAGES]
        ax.scatter(xs, peaks, marker="_", s=900, color="black", linewidths=2, zorder=5,
                   label="measured peak of the total (high-water mark)")
        ax.scatter(xs, formula, marker="o", s=18, facecolors="white", edgecolors="black", zorder=6,
                   label="paper's formula for the model states")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([TITLES[s] for s in STAGES], rotation=0, fontsize=9)
        psi = int(rows[("ddp", "total")]["psi"])
        ax.set_title(f"N = {n}" + (" (one process)" if n == 1 else " ranks"), fontsize=11)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    axes[0].set_ylabel("MiB per rank")
    axes[0].yaxis.set_major_formatter(mib_formatter(plt))
    fig.suptitle(f"Per-rank memory by category (measured on rank 0), GPT with Psi = {psi:,} parameters, {dtype}, "
                 f"global batch fixed\nbar = model states after the step + each transient category at its own peak; "
                 f"black line = the peak of the total", fontsize=10.5)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8.5, frameon=False)
    fig.tight_layout(rect=(0, 0.13, 1, 0.93))
    path = os.path.join(out, "memory_by_stage.png")
    fig.savefig(path, dpi=130, bbox_inches="tight")  # legends outside the axes stay in
    plt.close(fig)
    return path


def pick_trace(out):
    traces = by_n(out, "trace")
    if not traces:
        return None, None
    n = 4 if 4 in traces else max(traces)
    return n, traces[n]


def trace_of(rows, stage, prefetch=None):
    sel = [r for r in rows if r["stage"] == stage and (prefetch is None or int(r["prefetch"]) == prefetch)]
    if prefetch is None and sel:
        p = max(int(r["prefetch"]) for r in sel)
        sel = [r for r in sel if int(r["prefetch"]) == p]
    return sorted(sel, key=lambda r: int(r["seq"]))


def phases(tr):
    t = {r["event"]: float(r["t_ms"]) for r in tr if r["event"] in ("loss_computed", "backward_done", "step_begin",
                                                                     "step_end", "zero_grad_done")}
    return t


# ---- (2) memory over one step ----
def plot_memory_step(out, plt):
    n, rows = pick_trace(out)
    if rows is None:
        return None
    # A gather's finish is reported after it happened (its memory is the report's): not a sample.
    z3, ddp = ([r for r in trace_of(rows, st) if r["event"] != "gather_finished"] for st in ("zero3", "ddp"))
    fig, axes = plt.subplots(3, 1, figsize=(11, 8.5), sharex=True)
    series = [("param", "parameters (full + shard)"), ("grad", "gradients (full + shard)"),
              ("total", "total, incl. activations\n(sampled at events)")]
    for ax, (col, label) in zip(axes, series):
        for tr, name, color in ((ddp, "DDP", STAGE_COLORS["ddp"]), (z3, "ZeRO-3", STAGE_COLORS["zero3"])):
            t, v = [float(r["t_ms"]) for r in tr], [int(r[col]) / MIB for r in tr]
            if col == "total":  # activations change between events too: join the samples
                ax.plot(t, v, color=color, label=name, linewidth=1.6)
            else:  # parameters and gradients change only at events: exact steps
                ax.step(t, v, where="post", color=color, label=name, linewidth=1.6)
            ax.plot([float(r["t_ms"]) for r in tr], [int(r[col]) / MIB for r in tr], ".", color=color, markersize=3)
        ax.set_ylabel(f"{label}\nMiB on rank 0", fontsize=9)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.yaxis.set_major_formatter(mib_formatter(plt))
    # Name ZeRO-3's gathers and frees on the parameter panel.
    ax = axes[0]
    for r in z3:
        if r["event"] == "gather_issue":
            ax.annotate(f"+{r['unit']}", (float(r["t_ms"]), int(r["param"]) / MIB), xytext=(0, 4),
                        textcoords="offset points", fontsize=7, color=STAGE_COLORS["zero3"], ha="center")
    ph = phases(z3)
    for ax in axes:
        if "loss_computed" in ph:
            ax.axvspan(0, ph["loss_computed"], color="#1f77b4", alpha=0.06)
        if "loss_computed" in ph and "backward_done" in ph:
            ax.axvspan(ph["loss_computed"], ph["backward_done"], color="#2ca02c", alpha=0.06)
        if "backward_done" in ph and "zero_grad_done" in ph:
            ax.axvspan(ph["backward_done"], ph["zero_grad_done"], color="#9467bd", alpha=0.08)
    top = axes[0].get_ylim()[1]
    if "loss_computed" in ph:
        y = top * 0.04
        axes[0].text(ph["loss_computed"] / 2, y, "ZeRO-3 forward", ha="center", va="bottom", fontsize=8)
        axes[0].text((ph["loss_computed"] + ph.get("backward_done", ph["loss_computed"])) / 2, y,
                     "ZeRO-3 backward", ha="center", va="bottom", fontsize=8)
        axes[0].text(ph.get("backward_done", 0), y, " clip +\n Adam", ha="left", va="bottom", fontsize=7)
    # DDP's own phases (its step is timed separately): marks on the DDP line of every panel.
    ph_ddp = phases(ddp)
    for key, text in (("loss_computed", "DDP backward ->"), ("backward_done", "DDP clip + Adam")):
        if key not in ph_ddp:
            continue
        for ax in axes:
            ax.axvline(ph_ddp[key], color=STAGE_COLORS["ddp"], linestyle="--", linewidth=0.9, alpha=0.8)
        axes[-1].text(ph_ddp[key], axes[-1].get_ylim()[1] * 0.97, " " + text, ha="left", va="top", fontsize=7.5,
                      color=STAGE_COLORS["ddp"])
    axes[0].legend(loc="center right", fontsize=8, framealpha=0.9)
    axes[-1].set_xlabel("time within the step (ms), rank 0; points = unit events (memory sampled there)")
    dtype = z3[0]["dtype"] if z3 else "?"
    fig.suptitle(f"Memory over one training step on rank 0 of N = {n} ({dtype}): ZeRO-3 gathers a unit's "
                 f"parameters (+h.i) and frees them after use; DDP keeps everything", fontsize=10.5)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    path = os.path.join(out, "zero3_memory_step.png")
    fig.savefig(path, dpi=130, bbox_inches="tight")  # legends outside the axes stay in
    plt.close(fig)
    return path


def spans(tr):
    """Per unit: lists of (start, end) for forward, backward, gather (issue -> bytes arrived),
    blocked (pre-hook -> its gather waited for), sync (the part of a blocked span spent waiting for
    the other ranks to reach a collective), reduce."""
    units = {}
    open_ = {}
    entered = {}
    syncs = []  # every rendezvous of the step, whichever unit's collective it guards
    for r in tr:
        u, e, t = r["unit"], r["event"], float(r["t_ms"])
        if not u:
            continue
        d = units.setdefault(u, {k: [] for k in ("forward", "backward", "gather", "blocked", "sync", "reduce")})
        if e.endswith("_hook"):
            entered[u] = t
        elif e in ("forward_begin", "backward_begin", "reduce_begin", "gather_issue", "sync_begin"):
            open_[(u, e.split("_")[0])] = t
        elif e in ("forward_end", "backward_end", "reduce_end"):
            k = e.split("_")[0]
            if (u, k) in open_:
                d[k].append((open_.pop((u, k)), t))
        elif e == "sync_end" and (u, "sync") in open_:
            syncs.append((open_.pop((u, "sync")), t))
        elif e == "gather_finished" and (u, "gather") in open_:
            d["gather"].append((open_.pop((u, "gather")), t))
        elif e == "gather_done":
            if (u, "gather") in open_:  # a backend that cannot time the bytes: until the wait returned
                d["gather"].append((open_.pop((u, "gather")), t))
            if u in entered:
                a = entered.pop(u)
                d["blocked"].append((a, t))
                d["sync"] += [(max(a, s0), min(t, s1)) for s0, s1 in syncs if s0 < t and s1 > a]
    return units


# ---- (3) timeline ----
def plot_timeline(out, plt):
    n, rows = pick_trace(out)
    if rows is None:
        return None
    prefetches = sorted({int(r["prefetch"]) for r in rows if r["stage"] == "zero3"}, reverse=True)
    fig, axes = plt.subplots(len(prefetches), 1, figsize=(12, 3.2 * len(prefetches) + 1.2), sharex=True,
                             squeeze=False)
    axes = axes[:, 0]
    colors = {"forward": "#4c72b0", "backward": "#55a868", "gather": "#f2c48d", "blocked": "#d62728",
              "sync": "#7f7f7f", "reduce": "#8172b3"}
    labels = {"forward": "forward compute", "backward": "backward compute",
              "gather": "all-gather in flight (issue -> its bytes arrived)",
              "blocked": "compute blocked: waiting for the all-gather's bytes",
              "sync": "compute blocked: waiting for the other ranks to reach the collective",
              "reduce": "reduce-scatter in flight (issue -> finished)"}
    for ax, pf in zip(axes, prefetches):
        tr = trace_of(rows, "zero3", pf)
        sp = spans(tr)
        order = ["root"] + sorted([u for u in sp if u != "root"], key=lambda u: int(u.split(".")[1]))
        yt, yl = [], []
        for i, u in enumerate(order):
            y = (len(order) - 1 - i) * 1.0
            root = u == "root"
            for k in ("forward", "backward"):
                bars = [(a, b - a) for a, b in sp[u][k]]
                ax.broken_barh(bars, (y + 0.05, 0.4), facecolors=colors[k], alpha=0.35 if root else 1.0,
                               hatch="//" if root else None, edgecolor="white" if not root else colors[k],
                               linewidth=0.3)
            for k in ("gather", "reduce"):
                bars = [(a, b - a) for a, b in sp[u][k]]
                ax.broken_barh(bars, (y - 0.45, 0.4), facecolors=colors[k], edgecolor="white", linewidth=0.3)
            for k in ("blocked", "sync"):  # the rendezvous drawn over the blocked span it is part of
                bars = [(a, b - a) for a, b in sp[u][k]]
                ax.broken_barh(bars, (y - 0.32, 0.14), facecolors=colors[k])
            yt += [y + 0.25, y - 0.25]
            yl += [f"{u} compute" + (" (encloses blocks)" if root else ""), f"{u} comm"]
        ph = phases(tr)
        for key in ("loss_computed", "backward_done"):
            if key in ph:
                ax.axvline(ph[key], color="black", linestyle=":", linewidth=1)
        if "loss_computed" in ph:
            ax.text(ph["loss_computed"], len(order) - 0.45, " backward ->", fontsize=8, va="top")
        if "backward_done" in ph:
            ax.text(ph["backward_done"], len(order) - 0.45, " clip + Adam", fontsize=8, va="top")
        blocked = sum(b - a for u in sp for a, b in sp[u]["blocked"])
        ranks = sum(b - a for u in sp for a, b in sp[u]["sync"])
        total = float(tr[-1]["t_ms"]) if tr else 0
        ax.set_title(f"ZeRO-3, prefetch {pf}" + (" (all-gather the next unit while this one computes)" if pf else
                                                  " (gather each unit only when it is needed)") +
                     f": step {total:.1f} ms, {blocked:.1f} ms blocked on all-gathers ({ranks:.1f} of them "
                     f"waiting for the other ranks)", fontsize=10)
        ax.set_yticks(yt)
        ax.set_yticklabels(yl, fontsize=7.5)
        ax.grid(axis="x", alpha=0.3)
        ax.set_ylim(-0.6, len(order) - 0.4)
    axes[-1].set_xlabel(f"time within the step (ms), rank 0 of N = {n}")
    from matplotlib.patches import Patch
    fig.legend([Patch(facecolor=colors[k]) for k in colors], [labels[k] for k in colors], loc="lower center",
               ncol=3, fontsize=8, frameon=False)
    fig.suptitle("Compute and communication per unit over one ZeRO-3 step (MPI runs collectives on its own "
                 "thread, so an all-gather in flight overlaps compute)", fontsize=10.5)
    fig.tight_layout(rect=(0, 0.08, 1, 0.96))
    path = os.path.join(out, "zero3_timeline.png")
    fig.savefig(path, dpi=130, bbox_inches="tight")  # legends outside the axes stay in
    plt.close(fig)
    return path


# ---- (4) largest model under a cap ----
def plot_largest(out, plt):
    data = by_n(out, "fit")
    if not data:
        return None
    fig, ax = plt.subplots(figsize=(12, 5))
    cap = None
    ns = sorted(data)
    # Every stage without offload; ZeRO-3 with NVMe offload where the run searched it
    # (zero_walkthrough --offload-dir): optimizer states, then parameter shards too.
    variants = [(s, "none") for s in STAGES] + [("zero3", "optimizer"), ("zero3", "optimizer+params")]
    variants = [v for v in variants if any(r["stage"] == v[0] and r.get("offload", "none") == v[1]
                                           for rows in data.values() for r in rows)]
    offload_colors = {"optimizer": "#6a3d9a", "optimizer+params": "#b15928"}
    width = 0.8 / (2 * len(variants))
    for i, (s, off) in enumerate(variants):
        for ck in (0, 1):  # without / with activation checkpointing of every block
            for j, n in enumerate(ns):
                rs = [r for r in data[n] if r["stage"] == s and int(r.get("checkpoint", 0)) == ck
                      and r.get("offload", "none") == off]
                if not rs:
                    continue
                cap = int(rs[0]["cap"])
                trained = [r for r in rs if r["how"] == "trained under cap"]
                if not trained:
                    continue
                best = max(trained, key=lambda r: int(r["n_layer"]))
                x = j + (2 * i + ck - (2 * len(variants) - 1) / 2) * width
                y = int(best["params"]) / 1e6
                name = TITLES[s] + ("" if off == "none" else f" + {off} on NVMe")
                ax.bar(x, y, width * 0.92, color=STAGE_COLORS[s] if off == "none" else offload_colors[off],
                       hatch="//" if ck else None, edgecolor="white" if ck else None,
                       label=(name + (" + checkpointing" if ck else "")) if j == 0 else None)
                ax.text(x, y, f"{best['n_layer']}", ha="center", va="bottom", fontsize=6)
    ax.set_xticks(range(len(ns)))
    ax.set_xticklabels([str(n) for n in ns])
    ax.set_xlabel("N (ranks; global batch fixed, so B/N rows per rank)")
    ax.set_ylabel("largest model that trains (million parameters)")
    ax.set_ylim(bottom=0)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.legend(title="stage (hatched: activation checkpointing)", loc="upper left", fontsize=8, ncol=2)
    cap_txt = f"{cap / MIB:g} MiB" if cap else "?"
    ax.set_title(f"Largest GPT (C fixed, n_layer = L grows, L above each bar) under a {cap_txt} per-rank memory cap\n"
                 f"measured: L trains 2 steps under the cap, L+1 runs out of memory", fontsize=10)
    fig.tight_layout()
    path = os.path.join(out, "largest_model.png")
    fig.savefig(path, dpi=130, bbox_inches="tight")  # legends outside the axes stay in
    plt.close(fig)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="walkthrough_out", help="directory of the CSVs and the PNGs")
    ap.add_argument("--run", metavar="BUILD_DIR", help="first run zero_walkthrough from this build for each N")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4, 8], help="N values for --run")
    ap.add_argument("extra", nargs="*", help="flags passed to zero_walkthrough after --, e.g. -- --dtype bf16")
    a = ap.parse_args()
    if any(n < 1 for n in a.ranks):
        fail(f"--ranks takes numbers of ranks, 1 or more (got {' '.join(map(str, a.ranks))})")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_walkthrough: matplotlib is missing: apt-get install python3-matplotlib (scripts/setup.sh)")
    if a.run:
        run_all(a.run, a.out, a.ranks, a.extra)
    check_one_run(a.out)
    try:
        made = [p for p in (plot_memory(a.out, plt), plot_memory_step(a.out, plt), plot_timeline(a.out, plt),
                            plot_largest(a.out, plt)) if p]
    except (KeyError, ValueError, IndexError) as e:  # a CSV with other columns or values
        fail(f"the CSVs in {a.out} are not zero_walkthrough's of this version ({type(e).__name__}: {e})")
    if not made:
        sys.exit(f"plot_walkthrough: no zero_walkthrough CSVs in {a.out} (run with --run BUILD_DIR)")
    for p in made:
        print(f"wrote {p}")


if __name__ == "__main__":
    main()
