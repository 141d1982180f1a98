"""What every command shares for output: JSON printing, the common options and a subcommand."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str))


def printable(text: str) -> str:
    """`text` without control characters but newlines: names and facts that other hosts
    wrote into a shared store must not drive this terminal (escape sequences)."""
    return "".join(c for c in text if c == "\n" or c.isprintable())


def stacked(names: list[str], width: int, room: int) -> dict[str, str]:
    """Cell names as a narrow table shows them: a factorial cell's levels one a line, each
    whole (`host=4k,` / `huge_pages=off`), where the longest name and the `room` the other
    columns need do not fit in `width`; else as they are. A table folds a long name mid-word."""
    longest = max(map(len, names), default=0)
    split = longest > 20 and longest + room > width
    return {n: n.replace(",", ",\n") if split else n for n in names}


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")


def add_store(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", metavar="PATH|URL", default=None,
                   help="results store: a SQLite file or postgresql://USER@HOST:PORT/DB (password: "
                        "PGPASSWORD or ~/.pgpass); default: $HUGELAB_STORE, else ./hugelab.db")


def action(sub: argparse._SubParsersAction, func: Callable[..., int], name: str, *,
           help: str, description: str | None = None) -> argparse.ArgumentParser:  # noqa: A002
    """The subcommand NAME of `sub`, run by `func`: its own options are added by the caller,
    then --json (`add_json`) last."""
    p = sub.add_parser(name, help=help, description=description)
    p.set_defaults(func=func)
    return p


def group(sub: argparse._SubParsersAction, name: str, *, help: str,  # noqa: A002
          description: str | None = None, metavar: str = "SUBCOMMAND"
          ) -> argparse._SubParsersAction:
    """The command NAME of `sub` whose work is done by its own subcommands (`action`)."""
    p = sub.add_parser(name, help=help, description=description)
    return p.add_subparsers(dest=f"{name}_command", metavar=metavar, required=True)
