#!/usr/bin/env python3
"""Draws a window of a profile_trace file (tensor.h's Chrome trace) as an SVG
timeline: one row per track, as Perfetto or chrome://tracing lays it out.

    python3 docs/trace_svg.py trace.json out.svg [--call NAME] [--first K] [--calls N] [--title T]

The window covers N calls (default 2) of the function NAME (default: the
first call's function) from its K-th call (default: the middle one). Only
the standard library is needed; a .gz trace is read as well."""
import argparse, gzip, json, sys
from xml.sax.saxutils import escape

COLORS = {"call": "#d9d9d9", "compile": "#bdbdbd", "cpu": "#4e79a7", "launch": "#f28e2b",
          "gpu": "#59a14f", "transfer": "#b07aa1", "device": "#59a14f"}


def color(e):
    if e["cat"] == "device" and ("FromHost" in e["name"] or "FromGpu" in e["name"]):
        return COLORS["transfer"]
    return COLORS.get(e["cat"], "#999999")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace"); ap.add_argument("svg")
    ap.add_argument("--call"); ap.add_argument("--first", type=int); ap.add_argument("--calls", type=int, default=2)
    ap.add_argument("--width", type=int, default=1100)
    ap.add_argument("--title", help="the picture's title (default: the file's name)")
    a = ap.parse_args()
    opener = gzip.open if a.trace.endswith(".gz") else open
    with opener(a.trace, "rt") as f:
        events = json.load(f)
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    xs = [e for e in events if e.get("ph") == "X"]
    calls = [e for e in xs if e["cat"] == "call" and (a.call is None or e["name"] == a.call)]
    if not calls:
        sys.exit("trace_svg: no call events%s in %s" % (" of " + a.call if a.call else "", a.trace))
    fn = calls[0]["name"]
    calls = sorted((e for e in calls if e["name"] == fn), key=lambda e: e["ts"])
    k = a.first if a.first is not None else len(calls) // 2
    win = calls[k:k + a.calls]
    t0 = win[0]["ts"] - 5
    t1 = max(e["ts"] + e["dur"] for e in win) + 5
    # device work queued by these calls may end after them: extend to it
    for e in xs:
        if e["cat"] == "device" and t0 <= e["ts"] <= t1:
            t1 = max(t1, e["ts"] + e["dur"] + 5)
    shown = [e for e in xs if e["ts"] < t1 and e["ts"] + e["dur"] > t0]
    tracks = sorted({e["tid"] for e in shown})
    left, row, top, W = 150, 46, 40, a.width
    scale = (W - left - 20) / (t1 - t0)
    H = top + row * len(tracks) + 40
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">' % (W, H),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="10" y="20" font-size="13">%s: %d call%s of %s from call %d (%.1f us)</text>'
           % (escape(a.title or a.trace.split("/")[-1]), len(win), "" if len(win) == 1 else "s", escape(fn), k, t1 - t0)]
    for i, tid in enumerate(tracks):
        y = top + i * row
        out.append('<text x="10" y="%d">%s</text>' % (y + 27, escape(names.get(tid, "track %d" % tid))[:24]))
        out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#eeeeee"/>' % (left, W - 20, y + row, y + row))
        # a call is drawn under its steps, as a band
        for e in sorted((e for e in shown if e["tid"] == tid), key=lambda e: e["cat"] != "call"):
            x = left + max(0.0, e["ts"] - t0) * scale
            w = max(1.0, (min(e["ts"] + e["dur"], t1) - max(e["ts"], t0)) * scale)
            band = e["cat"] == "call"
            yy, hh = (y + 4, row - 8) if band else (y + 14, row - 24)
            title = "%s (%s, %.2f us)" % (e["name"], e["cat"], e["dur"])
            out.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" stroke="white" stroke-width="0.5">'
                       '<title>%s</title></rect>' % (x, yy, w, hh, color(e), escape(title)))
            label = e["name"] if not band else "%s (call, %.1f us)" % (e["name"], e["dur"])
            fit = int(w / 6.2)
            if fit >= 4:
                text = label if len(label) <= fit else label[:fit - 1] + "\u2026"
                out.append('<text x="%.1f" y="%d" fill="%s">%s</text>' % (x + 2, yy + (10 if band else 14), "#333" if band else "white", escape(text)))
    # time axis
    ya = top + row * len(tracks) + 15
    step = next(m * 10 ** e for e in range(0, 9) for m in (1, 2, 5) if (t1 - t0) / (m * 10 ** e) <= 10)
    t = 0.0
    while t <= t1 - t0:
        x = left + t * scale
        out.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#999"/>' % (x, x, ya - 5, ya))
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%d us</text>' % (x, ya + 12, t))
        t += step
    out.append("</svg>")
    with open(a.svg, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
