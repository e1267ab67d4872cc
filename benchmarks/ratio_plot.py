#!/usr/bin/env python3
"""Bar chart (SVG, no plotting library needed) of the vgpu/native ratios in run.sh summaries.

usage: ratio_plot.py OUT.svg LABEL=SUMMARY [LABEL=SUMMARY ...] [--metrics=a,b,c] [--ylabel=TEXT]

Each summary is a benchmarks/run.sh summary.txt; each metric gets one bar per summary, with a line
at 1.0 (native)."""
import sys

COLOURS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860"]


def ratios(path):
    out = {}
    for line in open(path):
        f = line.split()
        # metric native unit vgpu unit ratio medians
        if len(f) >= 7 and f[0] not in ("metric", "device:", "date:"):
            try:
                out[f[0]] = float(f[5])
            except ValueError:
                pass
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith(("--metrics", "--ylabel"))]
    chosen = [a.split("=", 1)[1].split(",") for a in sys.argv[1:] if a.startswith("--metrics=")]
    ylabel = ([a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--ylabel=")] or ["vGPU / native (best)"])[-1]
    if len(args) < 2:
        print(__doc__)
        return 2
    out, runs = args[0], [a.split("=", 1) for a in args[1:]]
    data = [(label, ratios(path)) for label, path in runs]
    metrics = chosen[0] if chosen else sorted({m for _, r in data for m in r})
    top = max([1.2] + [r.get(m, 0) for _, r in data for m in metrics])
    w, h, left, bottom, group = 760, 360, 60, 60, None
    group = (w - left - 20) / len(metrics)
    bar = group * 0.8 / len(data)
    y = lambda v: h - bottom - v / top * (h - bottom - 30)  # noqa: E731 - a scale, used below
    s = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
         'font-size="11">' % (w, h + 20 * len(data))]
    for tick in [0, 0.25, 0.5, 0.75, 1.0] + ([1.25] if top > 1.25 else []):
        s.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s"/>' %
                 (left, w - 20, y(tick), y(tick), "#000" if tick == 1.0 else "#ddd"))
        s.append('<text x="%d" y="%.1f" text-anchor="end">%.2f</text>' % (left - 5, y(tick) + 4, tick))
    for i, m in enumerate(metrics):
        x0 = left + i * group + group * 0.1
        for j, (_, r) in enumerate(data):
            if m not in r:  # not measured in that run
                continue
            v = r[m]
            s.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>' %
                     (x0 + j * bar, y(v), bar * 0.9, y(0) - y(v), COLOURS[j % len(COLOURS)]))
            s.append('<text x="%.1f" y="%.1f" text-anchor="middle" font-size="9">%.2f</text>' %
                     (x0 + j * bar + bar * 0.45, y(v) - 3, v))
        s.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % (left + i * group + group / 2, h - bottom + 18, m))
    s.append('<text x="15" y="%d" transform="rotate(-90 15 %d)" text-anchor="middle">%s</text>' %
             (h // 2, h // 2, ylabel))
    for j, (label, _) in enumerate(data):
        s.append('<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>' %
                 (left, h + 20 * j - 10, COLOURS[j % len(COLOURS)], left + 18, h + 20 * j, label))
    s.append("</svg>")
    open(out, "w").write("\n".join(s))
    print("plot: %s" % out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
