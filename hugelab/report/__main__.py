"""`python -m hugelab.report ...`: the report command on its own (same errors and exit codes
as `hugelab report`); used by bench/report_speed.py."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from hugelab import cli, cli_report
from hugelab.errors import HugelabError


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hugelab")
    parser.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command")
    cli_report.register(sub, cli._add_json, cli._add_store)
    args = parser.parse_args(["report", *(argv if argv is not None else sys.argv[1:])])
    try:
        return int(args.func(args))
    except HugelabError as exc:
        print(f"hugelab: error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"  hint: {exc.hint}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
