"""The command tree: a parser's subcommands by name (argparse keeps them in a private action),
for the help's examples, the generated reference and the errors that name a command."""

from __future__ import annotations

import argparse


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """`parser`'s subcommands by name ({} for a leaf command)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}
