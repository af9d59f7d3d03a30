#!/usr/bin/env python3
"""Charts and markdown tables from the course's Google Benchmark JSON (make bench).

  tools/plot_bench.py build/bench/lesson05.json --metric GB/s --out docs/img/lesson05.png
  tools/plot_bench.py build/bench/lesson05.json --table          # markdown table on stdout

Benchmark names follow Google Benchmark's "family/arg1/arg2" convention. With --table, one row
per benchmark (median of the repetitions when they were aggregated). With a chart, a family
whose names carry a numeric argument becomes a line over that argument (log-scale x, e.g. a
size sweep); families without one become bars. Needs matplotlib for charts (pip install
matplotlib); tables need nothing beyond the standard library.
"""
import argparse
import json
import re
import sys
from collections import OrderedDict


def clean(name):
    """Drop Google Benchmark's option suffixes: 'x/min_time:0.050/repeats:5/manual_time' -> 'x'."""
    name = re.sub(r"/(min_time|repeats|iterations|manual_time|real_time)[^/]*", "", name)
    return re.sub(r"/manual_time$", "", name)


def load(path):
    with open(path) as f:
        data = json.load(f)
    rows = OrderedDict()
    for b in data.get("benchmarks", []):
        agg = b.get("aggregate_name")
        if agg not in (None, "median"):
            continue
        name = clean(b.get("run_name", b["name"]))
        if agg is None and name in rows:
            continue  # repetitions without aggregates: keep the first
        rows[name] = b
    return data.get("context", {}), rows


def split(name):
    """'BM_reduce/v7/268435456' -> ('BM_reduce/v7', 268435456.0); no numeric tail -> (name, None)."""
    m = re.match(r"^(.*)/(\d+(?:\.\d+)?)$", name)
    return (m.group(1), float(m.group(2))) if m else (name, None)


def lookup(b, metric):
    """The counter `metric`; 'prefix*' takes the first counter whose name starts with prefix."""
    if metric.endswith("*"):
        for k, v in b.items():
            if k.startswith(metric[:-1]) and isinstance(v, (int, float)):
                return v
        return None
    return b.get(metric)


def select(rows, regex):
    """The rows whose name matches `regex` (all of them for an empty regex)."""
    return OrderedDict((k, v) for k, v in rows.items() if not regex or re.search(regex, k))


def table(rows, metrics):
    cols = ["benchmark", "time"] + [m.rstrip("*") for m in metrics]
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for name, b in rows.items():
        t = "%.1f %s" % (b.get("real_time", float("nan")), b.get("time_unit", ""))
        vals = []
        for m in metrics:
            v = lookup(b, m)
            vals.append("" if v is None else ("%.1f" % v if abs(v) >= 10 else "%.3g" % v))
        label = b.get("label", "")
        shown = "%s (%s)" % (name, label) if label and len(label) < 60 else name
        out.append("| " + " | ".join([shown, t] + vals) + " |")
    return "\n".join(out)


def chart(context, rows, metric, out, title, force_bars=False):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines, bars = OrderedDict(), OrderedDict()
    for name, b in rows.items():
        if metric not in b:
            continue
        family, x = split(name)
        if x is None or force_bars:
            bars[name] = b[metric]
        else:
            lines.setdefault(family, []).append((x, b[metric]))
    fig, ax = plt.subplots(figsize=(9, 5))
    if lines:
        for family, pts in lines.items():
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=family)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("size (benchmark argument)")
        ax.legend(fontsize=8)
    else:
        names = list(bars)
        ax.barh(names, [bars[n] for n in names])
        ax.invert_yaxis()
        for i, n in enumerate(names):
            ax.text(bars[n], i, " %.0f" % bars[n], va="center", fontsize=8)
    ax.set_ylabel(metric) if lines else ax.set_xlabel(metric)
    device = context.get("device", "unknown GPU")
    ax.set_title(title or "%s on %s" % (metric, device))
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print("wrote", out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("json")
    p.add_argument("--metric", default="GB/s", help="counter to plot (default GB/s)")
    p.add_argument("--filter", default="", help="regex: keep benchmarks whose name matches")
    p.add_argument("--out", help="PNG or SVG file to write")
    p.add_argument("--title")
    p.add_argument("--table", action="store_true", help="print a markdown table")
    p.add_argument("--bars", action="store_true", help="one bar per benchmark, even with a numeric argument")
    p.add_argument("--columns", default="GB/s,%copy",
                   help="counters in the table, comma-separated; 'prefix*' matches by prefix")
    a = p.parse_args()
    context, rows = load(a.json)
    rows = select(rows, a.filter)
    if not rows:
        sys.exit("no benchmarks in %s%s" % (a.json, " match " + a.filter if a.filter else ""))
    if a.table:
        print(table(rows, [c for c in a.columns.split(",") if c]))
    if a.out:
        chart(context, rows, a.metric, a.out, a.title, a.bars)
    if not a.table and not a.out:
        sys.exit("nothing to do: give --table and/or --out FILE")


if __name__ == "__main__":
    main()
