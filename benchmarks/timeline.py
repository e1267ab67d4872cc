#!/usr/bin/env python3
"""Put the timeline points (LOG_TIMELINE lines: "timeline NS POINT VALUE", anywhere in a log line)
of several processes' logs in one order, cut them into spans from a start point to an end point,
and print, for the most common sequence of points in a span, the median time of each point from
the span's start and from the point before it (timeline.sh runs it).
  timeline.py --start POINT [--value V] --end POINT [--show N] LABEL=LOG ...
A log labelled "mark" holds one point: everything before it is left out. --show N also prints N
spans whole (those whose length is nearest the median): where sequences differ from span to span
(a copy of several slots, whose points interleave), the medians of the most common one say little."""
import argparse
import collections
import statistics


def points(path):
    for line in open(path, errors="replace"):
        words = line.split()
        for i, w in enumerate(words[:-3]):
            if w == "timeline" and words[i + 1].isdigit():
                yield int(words[i + 1]), words[i + 2], words[i + 3]
                break


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--start", required=True)
    ap.add_argument("--value")
    ap.add_argument("--end", required=True)
    ap.add_argument("--show", type=int, default=0)
    ap.add_argument("logs", nargs="+")
    a = ap.parse_args()
    events, since = [], 0
    for spec in a.logs:
        label, path = spec.split("=", 1)
        for t, point, value in points(path):
            if label == "mark":
                since = max(since, t)
            else:
                events.append((t, label + ":" + point, value))
    events = sorted(e for e in events if e[0] >= since)
    spans, cur = [], None
    for t, point, value in events:
        if point.endswith(":" + a.start) and (a.value is None or value == a.value):
            cur = [(t, point, value)]
        elif cur is not None:
            cur.append((t, point, value))
            if point.endswith(":" + a.end):
                spans.append(cur)
                cur = None
    if not spans:
        print("no span from %s to %s" % (a.start, a.end))
        return
    kinds = collections.Counter(tuple(p for _, p, _ in s) for s in spans)
    seq, n = kinds.most_common(1)[0]
    print("%d spans; the most common sequence of points, %d of them (medians):" % (len(spans), n))
    rows = [s for s in spans if tuple(p for _, p, _ in s) == seq]
    for i, point in enumerate(seq):
        at = statistics.median(r[i][0] - r[0][0] for r in rows) / 1e3
        step = statistics.median(r[i][0] - r[i - 1][0] for r in rows) / 1e3 if i else 0.0
        print("  %-28s %-10s at %9.1f us   step %8.1f us" % (point, rows[0][i][2], at, step))
    if a.show:
        length = statistics.median(s[-1][0] - s[0][0] for s in spans)
        for s in sorted(spans, key=lambda s: abs(s[-1][0] - s[0][0] - length))[:a.show]:
            print("a span of %.1f us (the median: %.1f us), whole:" % ((s[-1][0] - s[0][0]) / 1e3, length / 1e3))
            for i, (t, point, value) in enumerate(s):
                print("  %-28s %-10s at %9.1f us   step %8.1f us" %
                      (point, value, (t - s[0][0]) / 1e3, (t - s[i - 1][0]) / 1e3 if i else 0.0))


if __name__ == "__main__":
    main()
