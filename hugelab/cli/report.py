"""`hugelab report`: paired verdicts, classic table, tails, evidence; terminal, JSON, Markdown, HTML."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from hugelab.errors import UsageError

AddOpt = Callable[[argparse.ArgumentParser], None]


def fraction(text: str) -> float:
    """'1%' -> 0.01, '0.01' -> 0.01."""
    try:
        return float(text[:-1]) / 100 if text.strip().endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a fraction or percentage: {text!r}") from None


def pair(text: str) -> tuple[str, str]:
    base, sep, cand = text.partition(":")
    if not sep or not base or not cand:
        raise argparse.ArgumentTypeError(f"--pair wants BASELINE:CANDIDATE, got {text!r}")
    return base, cand


def register(sub: argparse._SubParsersAction, add_json: AddOpt, add_store: AddOpt) -> None:
    p = sub.add_parser(
        "report", help="paired verdicts with intervals, classic table, tails, evidence",
        description="Analyses one run (default: the latest): each arm against the baseline arm, "
        "paired by block (ok trials only), Hodges-Lehmann effect with its signed-rank interval, "
        "Wilcoxon and TOST p-values Holm-adjusted across the report; what each arm costs "
        "(memory, compaction, khugepaged); tails; flagged and failed trials; evidence.")
    p.add_argument("run", nargs="?", type=int, help="run id (default: the latest run)")
    add_store(p)
    add_json(p)
    p.add_argument("--html", type=Path, metavar="FILE",
                   help="also write a self-contained HTML report with figures")
    p.add_argument("--md", type=Path, metavar="FILE", help="also write the report as Markdown")
    p.add_argument("--full", action="store_true",
                   help="in the terminal, every table (tails, the classic table, drift, the "
                   "cost record); --json, --md and --html always have everything")
    p.add_argument("--alpha", type=fraction, default=0.05,
                   help="family-wise false-positive rate across the report (default 0.05)")
    p.add_argument("--margin", type=fraction, default=0.01,
                   help="equivalence margin, e.g. 1%% (default)")
    p.add_argument("--memory-margin", type=fraction, default=None, metavar="M",
                   help="state an arm's memory trade beyond this share (default: [costs] "
                   "memory_margin, else 2%%)")
    p.add_argument("--confidence", type=fraction, default=0.9999,
                   help="confidence of the classic table's t margin (default 99.99%%)")
    p.add_argument("--pair", type=pair, action="append", default=[],
                   metavar="BASELINE:CANDIDATE",
                   help="compare CANDIDATE with BASELINE instead of every arm with the baseline "
                   "arm; repeatable (arm@target where a run has several targets)")
    p.add_argument("--experiment", metavar="NAME",
                   help="one report across hosts: every host's run of experiment NAME (hugelab "
                   "fleet run makes them), pooled with the host as a random effect; forest plot, "
                   "host facts")
    p.add_argument("--across", type=run_ids, metavar="ID,ID,...",
                   help="one report across runs you name (a verdict made again another day), "
                   "pooled with the run as a random effect: tau, the next run's interval")
    p.set_defaults(func=cmd_report)


def run_ids(text: str) -> list[int]:
    """'3,4,5' -> [3, 4, 5]."""
    try:
        ids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"run ids like 3,4,5 wanted, got {text!r}") from None
    if any(i < 1 for i in ids):
        raise argparse.ArgumentTypeError(f"run ids are 1 or more, got {text!r}")
    return ids


def _check(args: argparse.Namespace) -> None:
    if not 0 < args.alpha < 0.5:
        raise UsageError(f"--alpha must lie between 0 and 0.5, got {args.alpha:g}")
    if not 0 < args.margin < 1:
        raise UsageError(f"--margin must lie between 0 and 100%, got {100 * args.margin:g}%")
    if args.memory_margin is not None and not 0 <= args.memory_margin < 10:
        raise UsageError(f"--memory-margin must lie between 0 and 1000%, got "
                         f"{100 * args.memory_margin:g}%")
    if not 0 < args.confidence < 1:
        raise UsageError(f"--confidence must lie between 0 and 100%, got "
                         f"{100 * args.confidence:g}%")


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from exc


def cmd_report(args: argparse.Namespace) -> int:
    _check(args)
    if args.experiment is not None or args.across is not None:
        return _fleet_report(args)
    from hugelab.report.analysis import Options, analyse
    from hugelab.report.runload import load_run
    from hugelab.store.locate import open_store, shown

    with open_store(args.store, must_exist=True) as store:
        data = load_run(store, args.run)
    report = analyse(data, Options(alpha=args.alpha, margin=args.margin,
                                   confidence=args.confidence, pairs=tuple(args.pair),
                                   memory_margin=args.memory_margin))
    result = report.result
    result.store = shown(args.store)
    if args.md:
        from hugelab.report import markdown
        _write(args.md, markdown.render(result))
    if args.html:
        from hugelab.report import html, plots
        details, notes = plots.detail_figures(report)
        _write(args.html, html.render(result, details, lead=plots.lead_figures(report),
                                      figure_notes=notes))
    if args.json:
        from hugelab.report import jsonreport
        print(jsonreport.render(result))
        return 0
    from rich.console import Console

    from hugelab.report import text
    text.render(result, full=args.full)
    con = Console(stderr=True)
    for what, path in (("Markdown", args.md), ("HTML", args.html)):
        if path:
            con.print(f"wrote {what} report to {path}", markup=False, highlight=False)
    return 0


def _fleet_report(args: argparse.Namespace) -> int:
    from hugelab.report import fleet
    from hugelab.report.analysis import Options
    from hugelab.store.locate import open_store

    if args.experiment is not None and args.across is not None:
        raise UsageError("--experiment pools every host's run, --across the runs you name: give one")
    if args.run is not None or args.pair:
        what = "--experiment merges every host's run" if args.across is None else \
            "--across names the runs it pools"
        raise UsageError(f"{what}: it takes no RUN and no --pair",
                         hint=None if args.across is None else
                         "separate the run ids with commas: --across 3,4,5")
    opts = Options(alpha=args.alpha, margin=args.margin, confidence=args.confidence)
    with open_store(args.store, must_exist=True) as store:
        report = (fleet.FleetReport.from_store(store, args.experiment, opts)
                  if args.across is None else fleet.FleetReport.from_runs(store, args.across, opts))
        where = store.name
    if args.md:
        _write(args.md, fleet.render_markdown(report))
    if args.html:
        _write(args.html, fleet.render_html(report))
    if args.json:
        print(json.dumps({**fleet.to_json(report), "store": where}, indent=2, default=str))
        return 0
    from hugelab.cli.output import printable
    print(printable(fleet.render_text(report)))
    for what, path in (("Markdown", args.md), ("HTML", args.html)):
        if path:
            print(f"wrote {what} report to {path}")
    return 0
