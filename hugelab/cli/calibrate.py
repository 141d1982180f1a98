"""`hugelab run DUET --calibrate`: runs a duet's calibration (hugelab.planning.calibration)
and prints what the duet comparison can and cannot claim."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.markup import escape

from hugelab.experiment import Experiment
from hugelab.planning.calibration import RunOne, calibrate
from hugelab.store.locate import open_store


def print_summary(c: dict[str, Any], con: Console | None = None) -> None:
    con = con or Console()
    con.print(f"duet calibration: run {c['together_run']} (together) and run "
              f"{c['alone_run']} (alone)", markup=False)
    for line in c["claims"]:
        con.print(f"  {escape(line)}")
    inter = c.get("interference") or {}
    if "error" in inter:
        con.print(f"  interference: not estimated ({escape(inter['error'])})")


def cmd(args: argparse.Namespace, exp: Experiment, run_one: RunOne) -> int:
    """Run the calibration with `run_one` (one block more of a run per call), then print what
    the duet can claim."""
    with open_store(args.store) as store:
        result = calibrate(exp, store, run_one)
    if args.json:
        from hugelab.cli.output import print_json
        print_json(result)
    else:
        print_summary(result)
    return 0
