#!/usr/bin/env python3
"""Plots bench/relays.sh's CSV as SVG (no dependencies): per link rate, one panel per
traffic pattern with the median aggregate bandwidth of each path kind against the
message size (log scale), and the 128 B latencies in the title. Prints the summary
tables (markdown) of docs/experiments.md: medians (min-max) and the ratios the issue
names.

    bench/plot-relays.py bench/results/relays.csv docs/experiments [PREFIX]

(SVG files PREFIX-RATEmbit.svg, PREFIX default "relays"; only the path kinds the CSV has.)
"""
import csv
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

COLORS = {"routed": "#1b9e77", "nat-proxy": "#d95f02", "two-proxy": "#7570b3", "punched": "#e7298a"}
W, H, PAD = 300, 220, 48


def medians(rows):
    groups = defaultdict(list)
    for r in rows:
        groups[(r["rate"], r["path"], r["pattern"], int(r["bytes"]))].append(float(r["value"]))
    return {k: statistics.median(v) for k, v in groups.items()}


def panel(x0, y0, title, series, ymax):
    out = [f'<g transform="translate({x0},{y0})">',
           f'<text x="{W / 2}" y="14" text-anchor="middle" font-size="13">{title}</text>']
    left, top, right, bottom = PAD, 24, W - 10, H - 34
    out.append(f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" fill="none" stroke="#999"/>')
    sizes = sorted({s for pts in series.values() for s, _ in pts})
    lo, hi = math.log2(sizes[0]), math.log2(sizes[-1])
    sx = lambda s: left + (math.log2(s) - lo) / max(hi - lo, 1) * (right - left)
    sy = lambda v: bottom - v / ymax * (bottom - top)
    for tick in range(0, 5):
        v = ymax * tick / 4
        out.append(f'<text x="{left - 4}" y="{sy(v) + 4:.1f}" text-anchor="end" font-size="10">{v:.0f}</text>')
    for s in sizes[:: max(1, len(sizes) // 5)]:
        label = f"{s // 1024}K" if s < 1 << 20 else f"{s >> 20}M"
        out.append(f'<text x="{sx(s):.1f}" y="{bottom + 14}" text-anchor="middle" font-size="10">{label}</text>')
    out.append(f'<text x="{(left + right) / 2}" y="{H - 4}" text-anchor="middle" font-size="10">message size</text>')
    out.append(f'<text x="12" y="{(top + bottom) / 2}" font-size="10" transform="rotate(-90 12 {(top + bottom) / 2})" text-anchor="middle">MB/s</text>')
    for path, pts in series.items():
        d = " ".join(f"{sx(s):.1f},{sy(v):.1f}" for s, v in sorted(pts))
        out.append(f'<polyline points="{d}" fill="none" stroke="{COLORS[path]}" stroke-width="2"/>')
    out.append("</g>")
    return out


def spread(values):
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def tables(rows):
    out = []
    by = defaultdict(list)
    for r in rows:
        by[(r["rate"], r["path"], r["pattern"], int(r["bytes"]))].append(float(r["value"]))
    rates = sorted({r["rate"] for r in rows}, key=int)
    paths = [p for p in COLORS if any(k[1] == p for k in by)]
    others = [p for p in paths if p != "routed"]
    # Latency: each path, then the ratios and differences the issue names.
    ratios = [(a, b) for a, b in [("nat-proxy", "two-proxy"), ("punched", "routed")] if a in paths and b in paths]
    diffs = [p for p in ["nat-proxy", "punched"] if p in paths and "routed" in paths]
    out.append("| link | " + " | ".join(f"{p} µs" for p in paths)
               + "".join(f" | {a} / {b}" for a, b in ratios) + "".join(f" | {p} - routed" for p in diffs) + " |")
    out.append("|---" * (1 + len(paths) + len(ratios) + len(diffs)) + "|")
    for rate in rates:
        lat = {p: by.get((rate, p, "latency", 128)) for p in paths}
        if not all(lat.values()):
            continue
        m = {p: statistics.median(v) for p, v in lat.items()}
        out.append(f"| {rate} Mbit/s | " + " | ".join(spread(lat[p]) for p in paths)
                   + "".join(f" | {m[a] / m[b]:.3f}" for a, b in ratios)
                   + "".join(f" | {m[p] - m['routed']:+.1f} µs" for p in diffs) + " |")
    out.append("")
    if "routed" in paths:
        out.append("| link | pattern | size | " + " | ".join(f"{p} MB/s" for p in paths)
                   + "".join(f" | {p} / routed" for p in others) + " |")
        out.append("|---" * (3 + len(paths) + len(others)) + "|")
        for rate in rates:
            for pat in ["1:1", "2:1", "4:1", "4:4"]:
                for size in sorted({k[3] for k in by if k[0] == rate and k[2] == pat}):
                    v = {p: by.get((rate, p, pat, size)) for p in paths}
                    if not all(v.values()):
                        continue
                    m = {p: statistics.median(x) for p, x in v.items()}
                    label = f"{size // 1024} KiB" if size < 1 << 20 else f"{size >> 20} MiB"
                    out.append(f"| {rate} Mbit/s | {pat} | {label} | " + " | ".join(spread(v[p]) for p in paths)
                               + "".join(f" | {m[p] / m['routed']:.2f}" for p in others) + " |")
        out.append("")
    out.append("| link | path | bytes through the relays | relay CPU s per GB |")
    out.append("|---|---|---|---|")
    for r in rows:
        if r["pattern"] == "relay-cpu":
            gb = int(r["bytes"]) / 1e9
            # Below 10 MB the CPU time is mostly the relays' own wake-ups, not bytes.
            cpu = f"{float(r['value']):.2f}" if gb >= 0.01 else "— (too few bytes)"
            out.append(f"| {r['rate']} Mbit/s | {r['path']} | {gb:.3f} GB | {cpu} |")
    return "\n".join(out)


def main():
    src, dest = Path(sys.argv[1]), Path(sys.argv[2])
    prefix = sys.argv[3] if len(sys.argv) > 3 else "relays"
    rows = [dict(zip(["rate", "path", "pattern", "bytes", "run", "value"], r)) for r in csv.reader(src.open())]
    med = medians([r for r in rows if r["pattern"] not in ("relay-cpu",)])
    dest.mkdir(parents=True, exist_ok=True)
    for rate in sorted({r["rate"] for r in rows}, key=int):
        patterns = [p for p in ["1:1", "2:1", "4:1", "4:4"] if any(k[2] == p and k[0] == rate for k in med)]
        if not patterns:
            continue  # a latency-only run: tables only
        ymax = max(v for k, v in med.items() if k[0] == rate and k[2] != "latency") * 1.1
        lat = {p: med.get((rate, p, "latency", 128)) for p in COLORS if (rate, p, "latency", 128) in med}
        head = ", ".join(f"{p} {v:.0f} µs" for p, v in lat.items() if v is not None)
        width, height = W * len(patterns), H + 60
        svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif">',
               f'<rect width="{width}" height="{height}" fill="white"/>',
               f'<text x="8" y="18" font-size="13">{rate} Mbit/s: MB/s between the clusters (medians); 128 B one-way: {head}</text>']
        for i, pat in enumerate(patterns):
            series = {p: [(k[3], v) for k, v in med.items() if k[0] == rate and k[1] == p and k[2] == pat] for p in COLORS}
            svg += panel(i * W, 28, f"{pat}", {p: s for p, s in series.items() if s}, ymax)
        for i, (p, c) in enumerate((p, c) for p, c in COLORS.items() if p in lat):
            svg.append(f'<rect x="{10 + i * 110}" y="{H + 40}" width="12" height="12" fill="{c}"/>')
            svg.append(f'<text x="{26 + i * 110}" y="{H + 50}" font-size="12">{p}</text>')
        svg.append("</svg>")
        (dest / f"{prefix}-{rate}mbit.svg").write_text("\n".join(svg) + "\n")
    print(tables(rows))


if __name__ == "__main__":
    main()
