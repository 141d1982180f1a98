"""The CLI reference (docs/cli.md), generated from the parsers' own --help text."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator

from hugelab.cli.tree import subcommands


def _walk(parser: argparse.ArgumentParser, prefix: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield prefix, parser
    for name, sub in subcommands(parser).items():
        yield from _walk(sub, f"{prefix} {name}")


def helps() -> list[tuple[str, str]]:
    """Every command's name and its --help text, as a 100-column terminal shows it."""
    from hugelab.cli.main import build_parser

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        out = []
        for name, parser in _walk(build_parser(), "hugelab"):
            parser.prog = name
            out.append((name, parser.format_help().rstrip()))
        return out
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


def render() -> str:
    parts = ["# hugelab command reference",
             "",
             "Generated from `--help` by `python -m hugelab.cli.doc > docs/cli.md`; a test "
             "fails when it is out of date.", ""]
    for name, text in helps():
        parts += [f"## `{name}`", "", "```", text, "```", ""]
    return "\n".join(parts)


def commands() -> list[str]:
    from hugelab.cli.main import build_parser
    return [name for name, _ in _walk(build_parser(), "hugelab")]


if __name__ == "__main__":
    print(render(), end="")
