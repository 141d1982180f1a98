"""One worked example per command, shown at the end of its --help (and so in docs/cli.md).

Each example is a command line a test parses with the real parser, so none goes stale.
"""

from __future__ import annotations

import argparse

from hugelab.cli.tree import subcommands

# command (as docs/cli.md names it) -> (an example command line, what it does)
EXAMPLES: dict[str, tuple[str, str]] = {
    "hugelab inspect": ("hugelab inspect --json", "this host's THP, pools and NUMA as JSON"),
    "hugelab host": ("hugelab host set --thp madvise --dry-run", "what would change, unchanged"),
    "hugelab host set": ("hugelab host set --thp always --pool 2M=512 --dry-run",
                         "THP always and 512 pages of 2 MiB, shown, not done"),
    "hugelab host restore": ("hugelab host restore", "back to before the first `host set`"),
    "hugelab recover": ("hugelab recover --wait 10", "clean up after a killed run"),
    "hugelab run": ("hugelab run examples/redis-thp.toml --store redis.db --dry-run",
                    "what the run would do and how long it would take"),
    "hugelab show": ("hugelab show 3 --store redis.db", "run 3's trials, one line each"),
    "hugelab report": ("hugelab report --store redis.db --html redis.html",
                       "the latest run's verdicts, also as a web page"),
    "hugelab vm": ("hugelab vm qemu-args guest examples/003-native-vs-guest.toml",
                   "the QEMU command line of arm guest"),
    "hugelab vm qemu-args": ("hugelab vm qemu-args guest examples/003-native-vs-guest.toml",
                             "the QEMU command line of arm guest"),
    "hugelab vm libvirt-xml": ("hugelab vm libvirt-xml guest examples/003-native-vs-guest.toml",
                               "the same guest as a libvirt <domain>"),
    "hugelab vm diff": ("hugelab vm diff memfd-2M examples/005-own-vm-duet.toml",
                        "your domain's XML with the arm's guest memory, as a diff"),
    "hugelab vm demo-domain": ("hugelab vm demo-domain hugelab-demo-debian --accel tcg",
                               "a libvirt domain to try `domain = NAME` with"),
    "hugelab import": ("hugelab import --format sysbench thp=thp.txt 4k=4k.txt",
                       "two sysbench outputs as one run, arm=file"),
    "hugelab compare": ("hugelab compare monday.db friday.db --arm thp",
                        "did arm thp move between two stores' latest runs?"),
    "hugelab plan": ("hugelab plan --store pilot.db --arm thp --effect 2%",
                     "blocks a 2% effect needs, from a pilot run"),
    "hugelab store": ("hugelab store copy hugelab.db postgresql://me@db:5432/hugelab",
                      "this host's runs into a shared PostgreSQL store"),
    "hugelab store copy": ("hugelab store copy hugelab.db postgresql://me@db:5432/hugelab",
                           "this host's runs into a shared PostgreSQL store"),
    "hugelab store info": ("hugelab store info --store hugelab.db", "engine, migrations, runs"),
    "hugelab store flush": ("hugelab store flush --store postgresql://me@db:5432/hugelab",
                            "write trials spooled while the store was away"),
    "hugelab cache": ("hugelab cache list", "what hugelab keeps built on disk, and its size"),
    "hugelab cache list": ("hugelab cache list --json", "every entry, for a script"),
    "hugelab cache clear": ("hugelab cache clear postgres layers --dry-run",
                            "what removing every PostgreSQL template and layer would free"),
    "hugelab fleet": ("hugelab fleet run -i examples/fleet-hosts.ini examples/fleet-1g.toml "
                      "--store postgresql://me@db:5432/hugelab", "one experiment on every host"),
    "hugelab fleet run": ("hugelab fleet run -i examples/fleet-hosts.ini examples/fleet-1g.toml "
                          "--preflight-only", "which hosts can run it, changing nothing"),
    "hugelab fleet recover": ("hugelab fleet recover -i examples/fleet-hosts.ini "
                              "--limit host-b.example", "stop and put back that one host"),
}


class ExampleFormatter(argparse.HelpFormatter):
    """Wraps descriptions as usual but keeps an epilog's indented lines (examples) as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out = []
        for line in text.splitlines():
            if line.startswith(" ") or not line:
                out.append(indent + line)
            else:
                out.append(super()._fill_text(line, width, indent))
        return "\n".join(out)


def epilog(command: str) -> str:
    """The example block for `command`'s help ("" when it has none)."""
    if command not in EXAMPLES:
        return ""
    line, what = EXAMPLES[command]
    return f"Example ({what}):\n  {line}"


def attach(parser: argparse.ArgumentParser, name: str = "hugelab") -> None:
    """Give `parser` and every subcommand's parser below it its example and the formatter
    that shows it."""
    parser.formatter_class = ExampleFormatter
    if not parser.epilog:
        parser.epilog = epilog(name) or None
    for sub_name, sub in subcommands(parser).items():
        attach(sub, f"{name} {sub_name}")
