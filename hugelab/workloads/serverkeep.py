"""A server kept where it runs: the keeper (`python -m hugelab.workloads.serverkeep`) starts a
server kind's server as its child there (this host, or hugelab's own guest, whose /proc the
host cannot read), looks at the server's own THP picture (hugelab.workloads.servermem) every
half second, reading it within a CPU budget of its own or when its memory moved (`Picture`), and
at the stop (with --quiet only there), reads the kind's own report just before the server
stops, stops it (TERM, then KILL) and prints both as marked JSON lines, which the base
(hugelab.workloads.serverkind) reads back from the server's output.

A kind's `InPlace` says what is its own there; the defaults do nothing, which is how every
server in hugelab's own guests is kept (Redis's, memcached's). Its fields are strings, written
on the keeper's command line, so a guest turns a 127.0.0.1 among them into its NIC's address.
  workdir         whether the server needs a private directory where it runs (made by the
                  keeper, removed after the stop)
  command(argv, workdir)  the server's argv and its extra environment (Varnish: its VCL
                  written into workdir, MALLOC_CONF)
  own_pid(pid)    which process's memory is the server's own (Varnish: the manager's child,
                  its cache process; first_child)
  report(workdir) the server's own report, read where it runs while it runs (Varnish:
                  varnishstat's counters); {} for none
  settled(report) whether a report read at the stop is whole: the server's counters are summed
                  from its threads' own now and then, so the last one is read again while it is
                  not, a few seconds at most (Varnish: client_req, every hit, miss, synth and
                  pass counted; `last_report`)
  stop_asked(report)  a stop that is not a request of the server's own protocol: the keeper
                  ends the server by signal once the report says a stop was asked (Varnish: a
                  GET its VCL passes, counted by varnishd); a server stopped by its own
                  protocol (Redis's SHUTDOWN, memcached's shutdown) ends by itself instead.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

from hugelab import proc
from hugelab.walks import Walks
from hugelab.workloads.servermem import process_memory, process_rss_kb

MEMORY_MARK = "hugelab-servermem: "
REPORT_MARK = "hugelab-report: "


@dataclass(frozen=True)
class InPlace:
    """What a kind does where its server runs (see the module docstring); fields: strings."""

    workdir: ClassVar[bool] = False

    def command(self, argv: list[str], workdir: str | None) -> tuple[list[str], dict[str, str]]:
        return argv, {}

    def own_pid(self, pid: int) -> int | None:
        return pid

    def report(self, workdir: str | None) -> dict[str, Any]:
        return {}

    def stop_asked(self, report: dict[str, Any]) -> bool:
        return False

    def settled(self, report: dict[str, Any]) -> bool:
        return True


def last_report(hooks: InPlace, workdir: str | None, tries: int = 20,
                pause_s: float = 0.1) -> dict[str, Any]:
    """The kind's report once `hooks.settled` says it is whole, read again `tries` times at
    most, `pause_s` apart; the last reading when it never is."""
    report = hooks.report(workdir)
    for _ in range(tries - 1):
        if hooks.settled(report):
            break
        time.sleep(pause_s)
        report = hooks.report(workdir)
    return report


def first_child(pid: int, proc_dir: str = "/proc", comm: str | None = None) -> int | None:
    """The first process whose parent is `pid` (Varnish's cache process: its manager's child),
    and whose comm is `comm` where given (a keeper's server, not the report's program it runs
    beside it); None while it has none."""
    for entry in sorted((e for e in os.listdir(proc_dir) if e.isdigit()), key=int):
        try:
            stat = Path(proc_dir, entry, "stat").read_text()
        except OSError:
            continue
        name, rest = stat.split(" (", 1)[1].rsplit(")", 1)
        if int(rest.split()[1]) == pid and (comm is None or name == comm[:15]):
            return int(entry)
    return None


def keep(hooks: InPlace, argv: list[str], interval_s: float = 0.5, quiet: bool = False) -> int:
    """Run the server `argv` until it ends, a TERM/INT/HUP, or hooks.stop_asked; print its own
    memory's last picture and its last report, marked; the server's exit status when it ended
    by itself, else 0 (stopped as asked). `quiet`: read them only at the stop, none while the
    server runs (every kept server on this host, which hugelab stops by signal: no smaps walk
    nor report program beside its load on its CPUs)."""
    workdir = tempfile.mkdtemp(prefix="hugelab-keep-") if hooks.workdir else None
    argv, env = hooks.command(argv, workdir)
    # in this process's session, where a guest's agent samples the trial's tree (spawn would
    # start a session of its own); ended below, and with this process by the trial's scope
    child = proc.start(argv, env=dict(os.environ, **env) if env else None)
    stopping: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: stopping.append(s))
    picture = Picture(hooks, child.pid)
    report: dict[str, Any] = {}
    try:
        while child.poll() is None and not stopping:
            if not quiet:
                picture.look()
                report = hooks.report(workdir) or report
                if hooks.stop_asked(report):
                    break
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=interval_s)
        alone = child.poll() is not None
        if not alone:
            picture.look(always=True)
        memory = picture.last
        report = last_report(hooks, workdir) or report
    finally:
        code = proc.end(child, grace_s=3)
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(MEMORY_MARK + json.dumps(memory), flush=True)
    if report:
        print(REPORT_MARK + json.dumps(report), flush=True)
    return code if alone else 0


class Picture:
    """The kept server's last memory picture (servermem.process_memory). A look reads it as
    hugelab.walks allows: while its walks' CPU (the smaps reads) stays within a small share of
    one CPU, or when the server's RSS (a counter) moved since the last picture: a GiB in 4 KiB
    pages, whose walks take 17 times a THP one's, then costs the load beside it little more
    than the same GiB in THP while its memory holds still, and the picture still follows it
    while it grows (docs/benchmarks.md, "What hugelab's own reads cost")."""

    def __init__(self, hooks: InPlace, server: int) -> None:
        self.hooks, self.server = hooks, server
        self.last: dict[str, object] = {}
        self.walks = Walks()

    def look(self, always: bool = False) -> None:
        pid = self.hooks.own_pid(self.server)
        if not pid or not (always or self.walks.within()
                           or self.walks.moved(process_rss_kb(pid))):
            return
        spent: list[float] = []
        picture = process_memory(pid, walked=spent)
        rss = picture.get("rss_kb")
        if spent:
            self.walks.walked(sum(spent), rss if isinstance(rss, int) else None)
        self.last = picture or self.last


def keep_argv(hooks: InPlace, argv: list[str], python: str = sys.executable,
              quiet: bool = False) -> list[str]:
    """`argv` under the keeper with `hooks` (its class by module path, its fields as words);
    `quiet`: the keeper reads nothing while the server runs (keep's `quiet`)."""
    spec = f"{type(hooks).__module__}:{type(hooks).__qualname__}"
    words = [str(getattr(hooks, f.name)) for f in fields(hooks)]
    return [python, "-m", __name__, *(["--quiet"] if quiet else []), spec, *words, "--", *argv]


def marked(output: str, mark: str) -> dict[str, Any]:
    """The JSON object printed after `mark` last in a server's output; {} when none (pure)."""
    for line in reversed(output.splitlines()):
        if line.startswith(mark):
            try:
                value = json.loads(line[len(mark):])
            except ValueError:
                return {}
            return value if isinstance(value, dict) else {}
    return {}


def main(args: list[str]) -> int:
    quiet = bool(args) and args[0] == "--quiet"
    args = args[1:] if quiet else args
    if "--" not in args or args.index("--") < 1 or args[-1] == "--":
        print("usage: serverkeep.py [--quiet] MODULE:CLASS [FIELD...] -- SERVER ARGV...",
              file=sys.stderr)
        return 2
    cut = args.index("--")
    module, _, name = args[0].partition(":")
    hooks = getattr(importlib.import_module(module), name)(*args[1:cut])
    return keep(hooks, args[cut + 1:], quiet=quiet)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
