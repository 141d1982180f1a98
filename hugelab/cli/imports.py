"""`hugelab import`: bring results that exist (CSV, sysbench, stress-ng, iperf3) into a store."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from rich.console import Console

from hugelab.cli.output import print_json
from hugelab.store.importers import FORMATS, ImportResult, import_files, split_inputs

AddOpt = Callable[[argparse.ArgumentParser], None]


def register(sub: argparse._SubParsersAction, add_json: AddOpt, add_store: AddOpt) -> None:
    p = sub.add_parser(
        "import", help="bring existing results (CSV, sysbench, stress-ng, iperf3) into a store",
        description="Imports results that exist into a store as one run, so the same reports "
        "apply. CSV: one row per trial with a header; columns arm, value required; block, "
        "order, timestamp, unit, better optional. Raw tool outputs (sysbench memory text, "
        "stress-ng --metrics-brief text or --yaml, iperf3 -J JSON) hold no arm: name it with "
        "--arm ARM or pass ARM=FILE. Without block numbers the i-th trial of each arm is paired "
        "with the i-th of every other. Every row is validated first: if any is bad, all bad rows "
        "are listed with their line numbers and nothing is imported.")
    p.add_argument("files", nargs="+", metavar="FILE", help="FILE or ARM=FILE")
    add_store(p)
    add_json(p)
    p.add_argument("--name", help="name of the imported run (default: from the file names)")
    p.add_argument("--format", choices=FORMATS, help="input format (default: guessed per file)")
    p.add_argument("--arm", help="arm of every FILE not given as ARM=FILE (raw tool outputs)")
    p.add_argument("--baseline", help="baseline arm (default: the first arm in the input)")
    p.set_defaults(func=cmd_import)


def cmd_import(args: argparse.Namespace) -> int:
    items = split_inputs(args.files, args.arm)
    result = import_files(args.store, items, name=args.name, fmt=args.format,
                          baseline=args.baseline)
    if args.json:
        print_json(result.to_dict())
    else:
        _print_import(result)
    return 0


def _print_import(r: ImportResult) -> None:
    con = Console()
    arms = ", ".join(f"{a} ({n})" for a, n in r.arms.items())
    con.print(f"imported {r.trials} trial(s) into run {r.run_id} of {r.store} ('{r.name}'), "
              f"{r.blocks} block(s); arms: {arms}; baseline '{r.baseline}'", markup=False)
    for n in r.notes:
        con.print(f"note: {n}", markup=False)
    for w in r.warnings:
        con.print(f"warning: {w}", style="yellow", markup=False)
    con.print(f"trials: hugelab show {r.run_id} --store {r.store}", markup=False)
