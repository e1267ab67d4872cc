#!/usr/bin/env python3
"""Summarise benchmarks/share.sh's runs, and plot them when matplotlib is there.

For each run of clients with given weights: over the whole seconds in which every client was
running, each client's share of the GPU time used (busy / everybody's busy) against its target
(weight / everybody's weight); gap_pct is the largest difference, in percentage points, over the
whole interval, and also the mean and the worst over the 1 s windows. For the fixed-work runs: the
slowest and fastest finish times and their ratio. For the launch runs: the best launch rate with
the scheduler off and on.

    share_report.py DIR [--plot PNG_PREFIX]
"""
import os
import re
import sys


def read_meta(path):
    meta = {"clients": []}
    with open(path) as f:
        for line in f:
            w = line.split()
            if not w:
                continue
            if w[0] == "client":
                meta["clients"].append({"name": w[1], "kernel_us": int(w[2]), "start": float(w[3]),
                                        "seconds": float(w[4]), "weight": int(w[5])})
            elif w[0] == "fixed":
                meta["fixed"] = [int(x) for x in w[1:]]
            else:
                meta[w[0]] = w[1]
    return meta


def read_out(path):
    windows, results = {}, {}
    with open(path) as f:
        for line in f:
            w = line.split()
            if len(w) >= 3 and w[0] == "WINDOW":
                windows[int(w[1])] = int(w[2])
            elif len(w) >= 3 and w[0] == "RESULT":
                results[w[1]] = float(w[2])
    return windows, results


def share_run(d, meta):
    clients = meta["clients"]
    series = {c["name"]: read_out(os.path.join(d, c["name"] + ".out"))[0] for c in clients}
    # Whole windows in which every client ran (a second of slack at both ends).
    first = int(max(c["start"] for c in clients)) + 1
    last = int(min(c["start"] + c["seconds"] for c in clients)) - 1
    windows = list(range(first, last))
    total_w = sum(c["weight"] for c in clients)
    busy = {c["name"]: sum(series[c["name"]].get(k, 0) for k in windows) for c in clients}
    total = sum(busy.values()) or 1
    rows, gap = [], 0.0
    for c in clients:
        share, target = busy[c["name"]] / total, c["weight"] / total_w
        gap = max(gap, abs(share - target) * 100)
        rows.append((c, share, target, busy[c["name"]] / (len(windows) * 1e9) if windows else 0))
    win_gaps = []
    for k in windows:
        tot = sum(series[c["name"]].get(k, 0) for c in clients)
        if tot:
            win_gaps.append(max(abs(series[c["name"]].get(k, 0) / tot - c["weight"] / total_w) * 100
                                for c in clients))
    ends = vgpud_samples(d, meta, first, last)
    return {"rows": rows, "gap": gap, "windows": windows, "series": series,
            "charged_gap": charged_gap(meta, ends), "handovers": handovers(ends),
            "win_mean": sum(win_gaps) / len(win_gaps) if win_gaps else 0, "win_max": max(win_gaps, default=0),
            "gpu": total / (len(windows) * 1e9) if windows else 0}


HANDOVER_KEYS = ("wake_ns", "wakes", "notice_ns", "notices", "free_ns", "frees")


def vgpud_samples(d, meta, first, last):
    """vgpud's samples within [first, last] s: the first and the last, each (t, {program: busy_ns},
    {hand-over total: value over every vGPU's compute engine}); None without two of them."""
    path = os.path.join(d, "samples")
    if not os.path.exists(path):
        return None
    import json
    epoch = int(meta["epoch"])
    points = []
    t = None
    for line in open(path):
        if line.startswith("T "):
            t = (int(line.split()[1]) - epoch) / 1e9
        elif line.startswith("{") and t is not None:
            try:
                j = json.loads(line)
            except ValueError:
                continue
            busy, handover = {}, dict.fromkeys(HANDOVER_KEYS, 0)
            for s in j.get("sessions", []):
                for c in s.get("channels", []):
                    compute = c["sched"]["compute"]
                    busy[s["program"]] = busy.get(s["program"], 0) + compute["busy_ns"]
                    for k in HANDOVER_KEYS:
                        handover[k] += compute.get("handover", {}).get(k, 0)
            points.append((t, busy, handover))
    inside = [p for p in points if first <= p[0] <= last]
    return (inside[0], inside[-1]) if len(inside) >= 2 else None


def charged_gap(meta, ends):
    """The same interval from vgpud's samples (vgpud_samples): each vGPU's share of the compute
    time its scheduler charged (busy_ns), against the target."""
    if not ends:
        return None
    a, b = ends
    clients = meta["clients"]
    used = {c["name"]: b[1].get(c["name"], 0) - a[1].get(c["name"], 0) for c in clients}
    total = sum(used.values()) or 1
    total_w = sum(c["weight"] for c in clients)
    return max(abs(used[c["name"]] / total - c["weight"] / total_w) * 100 for c in clients)


def handovers(ends):
    """What a hand-over of the compute engine cost over the interval of vgpud's samples
    (vgpud_samples), in us: the grant reaching the worker, vgpud noticing a hand-back, the engine
    standing free while others waited; and how many hand-overs a second. None where vgpud does not
    report them."""
    if not ends:
        return None
    a, b = ends[0][2], ends[1][2]
    delta = {k: b[k] - a[k] for k in HANDOVER_KEYS}
    if not delta["wakes"]:
        return None
    mean = lambda total, count: delta[total] / delta[count] / 1e3 if delta[count] else 0
    return {"wake": mean("wake_ns", "wakes"), "notice": mean("notice_ns", "notices"),
            "free": mean("free_ns", "frees"), "per_s": delta["wakes"] / (ends[1][0] - ends[0][0])}


def fixed_run(d, meta):
    n = meta["fixed"][0]
    times = [read_out(os.path.join(d, "fixed%d.out" % (i + 1)))[1].get("share_finish_s", 0) for i in range(n)]
    return min(times), max(times)


def launch_rates(d):
    best = {}
    for policy in ("none", "band"):
        p = os.path.join(d, policy + ".out")
        if os.path.exists(p):
            rates = [float(m.group(1)) for m in re.finditer(r"RESULT launch_rate (\d+)", open(p).read())]
            best[policy] = max(rates) if rates else 0
    return best


def plot(runs, prefix):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: no plots)")
        return
    for group in ("two-equal", "two-30-70", "four"):
        names = [n for n in ("native", "fifo", "credit", "band") if (group + "-" + n) in runs]
        if not names:
            continue
        fig, axes = plt.subplots(len(names), 1, figsize=(8, 2.2 * len(names)), sharex=True, squeeze=False)
        for ax, policy in zip(axes[:, 0], names):
            r = runs[group + "-" + policy]
            last = max((max(s) for s in r["series"].values() if s), default=0)
            for c, _, target, _ in r["rows"]:
                s = r["series"][c["name"]]
                xs = list(range(0, last + 1))
                ax.plot(xs, [100 * s.get(k, 0) / 1e9 for k in xs],
                        label="vGPU %s (%d us kernels, weight %d)" % (c["name"], c["kernel_us"], c["weight"]))
            ax.set_ylim(0, 100)
            ax.set_ylabel("GPU %")
            ax.set_title("%s: gap %.1f points" % (policy.upper(), r["gap"]), fontsize=10)
            ax.grid(alpha=0.3)
        axes[0, 0].legend(fontsize=7, loc="upper right")
        axes[-1, 0].set_xlabel("time (s)")
        fig.tight_layout()
        out = "%s-%s.png" % (prefix, group)
        fig.savefig(out, dpi=110)
        print("plot: %s" % out)


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    top = sys.argv[1]
    prefix = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--plot" else None
    runs = {}
    print("%-24s %-8s %-28s %8s %8s %8s %8s" % ("run", "policy", "vGPU (kernel, weight)", "util", "share",
                                                  "target", "gap"))
    for name in sorted(os.listdir(top)):
        d = os.path.join(top, name)
        if not os.path.exists(os.path.join(d, "meta")):
            continue
        meta = read_meta(os.path.join(d, "meta"))
        if "fixed" in meta:
            lo, hi = fixed_run(d, meta)
            print("%-24s %-8s %d clients, fixed work: fastest %.2f s, slowest %.2f s, slowest/fastest %.3f"
                  % (name, meta["policy"], meta["fixed"][0], lo, hi, hi / lo if lo else 0))
            continue
        r = share_run(d, meta)
        runs[name] = r
        for i, (c, share, target, util) in enumerate(r["rows"]):
            label = "%s (%d us, %d)" % (c["name"], c["kernel_us"], c["weight"])
            print("%-24s %-8s %-28s %7.1f%% %7.1f%% %7.1f%% %8s" % (name if i == 0 else "", meta["policy"] if i == 0 else "",
                                                                  label, 100 * util, 100 * share, 100 * target,
                                                                  "%.2f" % r["gap"] if i == 0 else ""))
        print("%-24s %-8s GPU busy %.1f%%, %d windows; per-window gap mean %.2f, worst %.2f%s"
              % ("", "", 100 * r["gpu"], len(r["windows"]), r["win_mean"], r["win_max"],
                 "; by vgpud's accounting %.2f" % r["charged_gap"] if r["charged_gap"] is not None else ""))
        if r["handovers"]:
            h = r["handovers"]
            print("%-24s %-8s hand-overs %.0f/s: grant to worker %.1f us, hand-back to vgpud %.1f us, engine free "
                  "while others waited %.1f us" % ("", "", h["per_s"], h["wake"], h["notice"], h["free"]))
    rates = launch_rates(os.path.join(top, "launch")) if os.path.isdir(os.path.join(top, "launch")) else {}
    if rates.get("none"):
        print("launch rate, one client: scheduler off %.0f/s, BAND %.0f/s, ratio %.3f"
              % (rates["none"], rates.get("band", 0), rates.get("band", 0) / rates["none"]))
    if prefix:
        plot(runs, prefix)
    return 0


if __name__ == "__main__":
    sys.exit(main())
