#!/usr/bin/env python3
"""SVG (no plotting library needed) of benchmarks/oversub.sh's summary: the oversubscription
makespans as bars, and Gdev's Figure 12 analogue (the large tenant's time and the makespan as the
number of small tenants grows, with and without a device swap area) as lines.

usage: oversub_plot.py SUMMARY OUT.svg"""
import re
import sys


def parse(path):
    bars, lines = [], {}
    for line in open(path):
        m = re.match(r"\s+((?:through vGPUs|natively)[^:]*):\s+([\d.]+) s \((\d+)(?: of \d+)? failed", line)
        if m:  # a makespan where tenants failed says so under its bar
            failed = int(m.group(3))
            bars.append((m.group(1) + (f", {failed} failed" if failed else ""), float(m.group(2))))
            continue
        m = re.match(r"\s+((?:through vGPUs|natively)[^:]*):\s+([\d.]+) s", line)
        if m:
            bars.append((m.group(1), float(m.group(2))))
        f = line.split()
        if len(f) == 5 and f[0].isdigit():
            n, swap, large, span = int(f[0]), f[1], float(f[2]), float(f[3])
            lines.setdefault(swap, []).append((n, large, span))
    return bars, lines


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    bars, lines = parse(sys.argv[1])
    w, h = 900, 380
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           '<rect width="100%" height="100%" fill="white"/>']
    # Left: makespans.
    x0, y0, ph = 60, 320, 250
    top = max([v for _, v in bars] + [1])
    out.append(f'<text x="{x0}" y="30" font-size="14">Oversubscription (1.5x the GPU): makespan, s</text>')
    span = (w - x0 - 40 if not lines else 420) // max(len(bars), 1)  # the whole width without Fig. 12
    step = min(110, span)
    for i, (label, v) in enumerate(bars):
        bh = ph * v / top
        x = x0 + 20 + i * step
        out.append(f'<rect x="{x}" y="{y0 - bh:.1f}" width="70" height="{bh:.1f}" fill="#4c72b0"/>')
        out.append(f'<text x="{x + 35}" y="{y0 - bh - 4:.1f}" text-anchor="middle">{v:.1f}</text>')
        for k, word in enumerate(label.replace("through vGPUs, ", "vGPU, ").split(", ")):
            out.append(f'<text x="{x + 35}" y="{y0 + 16 + 14 * k}" text-anchor="middle">{word}</text>')
    out.append(f'<line x1="{x0}" y1="{y0}" x2="{x0 + 20 + step * len(bars)}" y2="{y0}" stroke="black"/>')
    # Right: Gdev Figure 12.
    gx0, gw = 500, 360
    if lines:
        out.append(f'<text x="{gx0}" y="30" font-size="14">Gdev Fig. 12 analogue: seconds vs small tenants</text>')
    pts = [p for series in lines.values() for p in series]
    if pts:
        nmax = max(p[0] for p in pts) or 1
        tmax = max(max(p[1], p[2]) for p in pts)
        colours = {"0": "#4c72b0", "10%": "#dd8452"}
        for swap, series in sorted(lines.items()):
            c = colours.get(swap, "#55a868")
            for idx, dash in ((1, ""), (2, ' stroke-dasharray="5,3"')):
                path = " ".join(f"{gx0 + gw * n / nmax:.1f},{y0 - ph * p[idx] / tmax:.1f}"
                                for n, *rest in series for p in [(n, *rest)])
                out.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2"{dash}/>')
        out.append(f'<line x1="{gx0}" y1="{y0}" x2="{gx0 + gw}" y2="{y0}" stroke="black"/>')
        for n in sorted({p[0] for p in pts}):
            out.append(f'<text x="{gx0 + gw * n / nmax:.1f}" y="{y0 + 16}" text-anchor="middle">{n}</text>')
        out.append(f'<text x="{gx0}" y="{y0 + 36}">solid: the large tenant; dashed: makespan; blue: no device swap, orange: 10%</text>')
        out.append(f'<text x="{gx0 - 8}" y="{y0 - ph}" text-anchor="end">{tmax:.0f}</text>')
    out.append("</svg>")
    open(sys.argv[2], "w").write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
