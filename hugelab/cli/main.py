"""Command line: parse arguments, call the library, print tables or JSON, map errors to exits."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Sequence

from hugelab import __version__
from hugelab.cli.examples import attach
from hugelab.cli.output import add_json, add_store
from hugelab.cli.tree import subcommands
from hugelab.errors import HugelabError, UsageError, did_you_mean

Handler = Callable[[argparse.Namespace], int]

EPILOG = """\
The loop: configure -> run -> verify -> record -> decide -> report, and the host is put back.
Examples:
  hugelab inspect                      what this host offers (THP, pools, NUMA, fragmentation)
  hugelab run                          the built-in experiment: 4k vs THP vs hugetlb 2M/1G
  hugelab run my.toml --store my.db    your experiment; re-running resumes it
  hugelab show                         runs and trials in ./hugelab.db
  hugelab host set --thp always --pool 2M=512 --dry-run
  hugelab recover                      put the host back after a killed run
"""


def build_parser() -> argparse.ArgumentParser:
    from hugelab.cli import cache, compare, fleet, host, imports, plan, report, run, store, vm

    parser = argparse.ArgumentParser(
        prog="hugelab", description="What do huge pages buy this workload, on this host and "
        "inside its KVM/QEMU guests? hugelab answers with evidence.",
        epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"hugelab {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    host.register(sub, add_json)
    run.register(sub, add_json, add_store)
    report.register(sub, add_json, add_store)
    vm.register(sub, add_json)
    imports.register(sub, add_json, add_store)
    compare.register(sub, add_json)
    plan.register(sub, add_json, add_store)
    store.register(sub, add_json, add_store)
    fleet.register(sub, add_json)
    cache.register(sub, add_json)
    attach(parser)
    return parser


def _leaf(parser: argparse.ArgumentParser, argv: Sequence[str]
          ) -> tuple[argparse.ArgumentParser, int]:
    """The (sub)command's own parser that `argv` names (`hugelab vm diff ...`: diff's), and
    the position of its name in `argv` (-1: hugelab's own)."""
    at = -1
    for i, tok in enumerate(argv):
        subs = subcommands(parser)
        if tok.startswith("-") or not subs:
            continue
        if tok not in subs:
            break
        parser, at = subs[tok], i
    return parser, at


def _unknown(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    """What to say of arguments the command does not take: the option meant (a close name), or
    a positional given as an option (`report --run 1`: `report 1`)."""
    flags = [o for a in parser._actions for o in a.option_strings]
    places = {a.dest: a.metavar or a.dest.upper() for a in parser._actions
              if not a.option_strings}
    out = f"unrecognized arguments: {' '.join(extras)}"
    for word in extras:
        name = word.split("=", 1)[0]
        if not name.startswith("--"):
            continue
        if (dest := name[2:].replace("-", "_")) in places:
            return out + f" (the {dest} is given without a flag: {parser.prog} {places[dest]})"
        if close := did_you_mean(name, flags, quote=""):
            return out + f" ({close})"
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    given = list(sys.argv[1:] if argv is None else argv)
    args, extras = parser.parse_known_args(given)
    if extras:  # said by the command's own parser, with its usage, when given after its name
        leaf, at = _leaf(parser, given)
        if any(given.index(x) < at for x in extras):
            leaf = parser
        leaf.error(_unknown(leaf, extras))
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except HugelabError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"hugelab: error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"  hint: {exc.hint}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("hugelab: interrupted; host settings were restored", file=sys.stderr)
        return 130
    except BaseException as exc:
        if type(exc).__name__ == "Terminated":
            print(f"hugelab: stopped by {exc}; host settings were restored", file=sys.stderr)
            return 143
        raise


def need(condition: bool, message: str, hint: str | None = None) -> None:
    if not condition:
        raise UsageError(message, hint)


def is_root() -> bool:
    return os.geteuid() == 0

