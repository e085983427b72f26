#!/usr/bin/env python3
"""Regenerate the figures table of benches/README.md from criterion's output.

Reads every `<criterion dir>/**/new/estimates.json` (with its sibling
`benchmark.json`) written by `cargo bench -p a2-benches`, and rewrites the part
of the README between the `<!-- figures:begin -->` and `<!-- figures:end -->`
markers: one table per group with the median time per iteration and per
element, the ratio to the group's baseline (or, in the scaling series, to the
smallest size), and the issue's targets checked against the figures.

Usage: python3 benches/figures.py [--criterion DIR] [--readme FILE] [--stdout]
"""

import argparse
import datetime
import json
import os
import sys
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
BEGIN = "<!-- figures:begin -->"
END = "<!-- figures:end -->"

# Which baseline each backend is compared with, in the same group and
# parameter: the first of its candidates the group holds. PostgreSQL commits
# durably, so it is set against bare rusqlite on a FULL file where the group
# has one (the `*_full` groups), else against the NORMAL file.
BASELINES = {
    "memory": ["baseline-collections"],
    "sqlite-memory": ["baseline-rusqlite-memory"],
    "sqlite-file": ["baseline-rusqlite-file"],
    "sqlite-file-full": ["baseline-rusqlite-file-full"],
    "postgres": ["baseline-rusqlite-file-full", "baseline-rusqlite-file"],
}


def load(criterion_dir):
    """Every benchmark's id and median (ns per iteration), keyed by full id."""
    figures = {}
    for root, _dirs, files in os.walk(criterion_dir):
        if os.path.basename(root) != "new" or "estimates.json" not in files:
            continue
        try:
            with open(os.path.join(root, "benchmark.json")) as f:
                bench = json.load(f)
            with open(os.path.join(root, "estimates.json")) as f:
                estimates = json.load(f)
        except (OSError, ValueError) as error:
            print(f"skipping {root}: {error}", file=sys.stderr)
            continue
        throughput = bench.get("throughput") or {}
        elements = throughput.get("Elements") or throughput.get("Bytes") or 1
        figures[bench["full_id"]] = {
            "group": bench["group_id"],
            "function": bench.get("function_id") or "",
            "param": bench.get("value_str") or "",
            "median": estimates["median"]["point_estimate"],
            "elements": elements,
            "mtime": os.path.getmtime(os.path.join(root, "estimates.json")),
        }
    return figures


def fmt_time(ns):
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def fmt_rate(per_second):
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if per_second >= scale:
            return f"{per_second / scale:.3g} {unit}/s"
    return f"{per_second:.3g} /s"


def param_key(param):
    try:
        return (0, float(param), param)
    except ValueError:
        return (1, 0.0, param)


def by_group(figures):
    groups = defaultdict(list)
    for fig in figures.values():
        groups[fig["group"]].append(fig)
    return groups


def find(figures, group, function, param):
    for fig in figures.values():
        if fig["group"] == group and fig["function"] == function and fig["param"] == param:
            return fig
    return None


def ratio_note(figures, fig, rows):
    """The ratio shown next to a figure, as text."""
    group = fig["group"]
    if group.startswith(("scaling_", "concurrent_", "work_")):
        same = [r for r in rows if r["function"] == fig["function"]]
        smallest = min(same, key=lambda r: param_key(r["param"]))
        if smallest is fig:
            return "1.00x (reference)"
        return f"{fig['median'] / smallest['median']:.2f}x of {smallest['param']}"
    for baseline in BASELINES.get(fig["function"], []):
        base = find(figures, group, baseline, fig["param"])
        if base is not None:
            return f"{fig['median'] / base['median']:.2f}x {baseline}"
    return ""


def table(figures):
    lines = []
    groups = by_group(figures)
    for group in sorted(groups):
        rows = sorted(groups[group], key=lambda r: (param_key(r["param"]), r["function"]))
        lines.append(f"#### `{group}`")
        lines.append("")
        lines.append("| parameter | backend | median / iteration | median / element | throughput | ratio |")
        lines.append("|---|---|---:|---:|---:|---|")
        for fig in rows:
            per_element = fig["median"] / fig["elements"]
            rate = fig["elements"] * 1e9 / fig["median"] if fig["median"] > 0 else 0.0
            lines.append(
                f"| {fig['param'] or '-'} | {fig['function']} | {fmt_time(fig['median'])} "
                f"| {fmt_time(per_element)} | {fmt_rate(rate)} | {ratio_note(figures, fig, rows)} |"
            )
        lines.append("")
    return lines


def check(lines, name, value, limit, detail, higher_is_better=False):
    if value is None:
        lines.append(f"- **not measured** — {name}: {detail}")
        return
    met = value >= limit if higher_is_better else value <= limit
    verdict = "met" if met else "MISSED"
    lines.append(f"- **{verdict}** — {name}: {detail}")


def ratio(figures, group, function, param, base_function, base_param=None):
    fig = find(figures, group, function, param)
    base = find(figures, group, base_function, base_param or param)
    if fig is None or base is None:
        return None, fig, base
    return fig["median"] / base["median"], fig, base


def targets(figures):
    lines = ["### Targets of the issue (from the figures above)", ""]
    value, fig, base = ratio(figures, "append", "sqlite-file", "100", "baseline-rusqlite-file")
    check(lines, "SQLite file append of 100 rows at least 0.5x the bare rusqlite rows/s",
          None if value is None else 1 / value, 0.5,
          "not measured" if value is None else
          f"{1 / value:.2f}x ({fmt_time(fig['median'])} vs {fmt_time(base['median'])} per batch)",
          higher_is_better=True)
    for backend, baseline in (("sqlite-memory", "baseline-rusqlite-memory"),
                              ("sqlite-file", "baseline-rusqlite-file")):
        value, fig, base = ratio(figures, "claim_complete", backend, "lane", baseline)
        check(lines, f"{backend} lane claim+complete at least 0.33x the bare row updates",
              None if value is None else 1 / value, 0.33,
              "not measured" if value is None else
              f"{1 / value:.2f}x ({fmt_time(fig['median'])} vs {fmt_time(base['median'])})",
              higher_is_better=True)
    value, fig, base = ratio(figures, "claim_complete", "memory", "lane", "baseline-collections")
    check(lines, "memory lane claim+complete at most 10x the bare collections", value, 10,
          "not measured" if value is None else
          f"{value:.2f}x ({fmt_time(fig['median'])} vs {fmt_time(base['median'])})")
    value, fig, base = ratio(figures, "claim_complete", "sqlite-memory", "lane", "memory")
    check(lines, "memory lane claim+complete at least 20x faster than sqlite-memory", value, 20,
          "not measured" if value is None else
          f"{value:.1f}x ({fmt_time(base['median'])} vs {fmt_time(fig['median'])})",
          higher_is_better=True)
    fig = find(figures, "claim_complete", "memory", "lane")
    check(lines, "memory lane claim+complete 10x faster than the TypeScript reference (14 µs)",
          None if fig is None else 14_000 / fig["median"], 10,
          "not measured" if fig is None else f"{14_000 / fig['median']:.1f}x ({fmt_time(fig['median'])})",
          higher_is_better=True)
    for group, param, ts_ns, what in (
        ("scaling_finished_claim_complete_event", "100000", 2_400_000,
         "event claim+complete with 100k finished event cursors (TS 2.4 ms)"),
        ("scaling_finished_append", "100000", 1_100_000,
         "append with 100k finished event cursors (TS 1.1 ms)"),
        ("scaling_inflight_claim_complete_event", "10000", 1_600_000,
         "event claim+complete with 10k in flight (TS 1.6 ms)"),
    ):
        fig = find(figures, group, "memory", param)
        check(lines, f"memory {what} 10x faster than TS",
              None if fig is None else ts_ns / fig["median"], 10,
              "not measured" if fig is None else f"{ts_ns / fig['median']:.0f}x ({fmt_time(fig['median'])})",
              higher_is_better=True)
    groups = by_group(figures)
    for group in sorted(g for g in groups if g.startswith("scaling_")):
        for function in sorted({r["function"] for r in groups[group]}):
            rows = sorted((r for r in groups[group] if r["function"] == function),
                          key=lambda r: param_key(r["param"]))
            if len(rows) < 2:
                continue
            small, large = rows[0], rows[-1]
            growth = large["median"] / small["median"]
            check(lines, f"`{group}` {function} flat within 2x", growth, 2.0,
                  f"{growth:.2f}x from {small['param']} ({fmt_time(small['median'])}) "
                  f"to {large['param']} ({fmt_time(large['median'])})")
    for function in sorted({r["function"] for r in groups.get("work_scaling", [])}):
        if function.endswith("-claim_available"):
            continue
        rows = sorted((r for r in groups["work_scaling"] if r["function"] == function),
                      key=lambda r: param_key(r["param"]))
        if len(rows) < 2:
            continue
        small, large = rows[0], rows[-1]
        growth = large["median"] / small["median"]
        base = find(figures, "work_scaling", f"{function}-claim_available", large["param"])
        versus = "" if base is None else (
            f"; {large['median'] / base['median']:.2f}x a claim_available at {large['param']} "
            f"({fmt_time(base['median'])})")
        check(lines, f"{function} cross-session claim grows at most 2x from {small['param']} "
              f"to {large['param']} sessions", growth, 2.0,
              f"{growth:.2f}x ({fmt_time(small['median'])} to {fmt_time(large['median'])}){versus}")
    for function in sorted({r["function"] for r in groups.get("work_fairness", [])}):
        rows = sorted((r for r in groups["work_fairness"] if r["function"] == function),
                      key=lambda r: param_key(r["param"]))
        if len(rows) < 2 or rows[0]["param"] != "0":
            continue
        none, backlog = rows[0], rows[-1]
        growth = backlog["median"] / none["median"]
        check(lines, f"{function} small sessions' append→claim beside a {backlog['param']}-event "
              "backlog at most 2x the run without it", growth, 2.0,
              f"{growth:.2f}x ({fmt_time(backlog['median'])} vs {fmt_time(none['median'])} per round "
              "of 199 messages)")
    lines.append("")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_dir = os.environ.get("CRITERION_HOME") or os.path.join(HERE, "..", "target", "criterion")
    parser.add_argument("--criterion", default=default_dir,
                        help="criterion's output (default: $CRITERION_HOME, else target/criterion)")
    parser.add_argument("--readme", default=os.path.join(HERE, "README.md"))
    parser.add_argument("--stdout", action="store_true", help="print instead of rewriting the README")
    args = parser.parse_args()

    figures = load(args.criterion)
    if not figures:
        print(f"no criterion estimates under {args.criterion}: run `cargo bench -p a2-benches` first",
              file=sys.stderr)
        return 1
    stamps = [fig["mtime"] for fig in figures.values()]
    first, last = (datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
                   for t in (min(stamps), max(stamps)))
    body = [
        BEGIN,
        "",
        f"_Measured {first} to {last}. "
        f"Generated by `python3 benches/figures.py` from {len(figures)} criterion estimates "
        "(median of each benchmark's samples). Ratios: a backend's time over its baseline's "
        "in the same group and parameter; in the `scaling_*`, `concurrent_*` and `work_*` groups, "
        "over the same backend's smallest parameter._",
        "",
    ]
    body += targets(figures)
    body += ["### All figures", ""]
    body += table(figures)
    body.append(END)
    text = "\n".join(body) + "\n"
    if args.stdout:
        sys.stdout.write(text)
        return 0
    with open(args.readme) as f:
        readme = f.read()
    if BEGIN not in readme or END not in readme:
        print(f"{args.readme} has no {BEGIN} ... {END} markers", file=sys.stderr)
        return 1
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(args.readme, "w") as f:
        f.write(head + text.rstrip("\n") + tail)
    print(f"wrote {len(figures)} figures to {args.readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
