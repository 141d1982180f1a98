"""What every command shares for output: JSON printing and the common options."""

from __future__ import annotations

import argparse
import json
from typing import Any


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str))


def printable(text: str) -> str:
    """`text` without control characters but newlines: names and facts that other hosts
    wrote into a shared store must not drive this terminal (escape sequences)."""
    return "".join(c for c in text if c == "\n" or c.isprintable())


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")


def add_store(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", metavar="PATH|URL", default=None,
                   help="results store: a SQLite file or postgresql://USER@HOST:PORT/DB (password: "
                        "PGPASSWORD or ~/.pgpass); default: $HUGELAB_STORE, else ./hugelab.db")
