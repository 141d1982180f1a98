"""`hugelab fleet run|recover`: one experiment on many hosts through Ansible, into one store."""

from __future__ import annotations

import argparse
import os
import threading
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn
from rich.table import Table

from hugelab.cli.output import print_json
from hugelab.errors import UsageError

AddOpt = Callable[[argparse.ArgumentParser], None]
POLL_S = 2.0  # how often the shared store is asked for each host's trial count


def register(sub: argparse._SubParsersAction, add_json: AddOpt) -> None:
    p = sub.add_parser("fleet", help="run one experiment on many hosts (Ansible) into one store",
                       description="Many hosts, one answer: Ansible (over SSH, with the "
                       "credentials of your inventory, ~/.ssh, ssh-agent or vault) installs "
                       "hugelab on every host with its ./bootstrap, copies the experiment, "
                       "selects out the hosts that cannot run an arm (no pdpe1gb, too little "
                       "memory for a pool, no KVM: before any change, with the reason), runs it "
                       "on the others in parallel, each host its own run labelled by its "
                       "inventory name, and recovers a host whose run fails. Then `hugelab "
                       "report --store URL --experiment NAME` merges them.")
    fs = p.add_subparsers(dest="fleet_command", metavar="SUBCOMMAND", required=True)
    r = fs.add_parser("run", help="run EXPERIMENT on every host of INVENTORY",
                      description="Runs EXPERIMENT on every host of an Ansible inventory. "
                      "Running the same command again resumes every host where it stopped "
                      "(no trial is repeated). Ctrl-C stops the hosts' runs and puts them back. "
                      "Exits 0 when every host ran (or was selected out), 1 when a host failed "
                      "or was unreachable, 130 when interrupted.")
    r.add_argument("experiment", type=Path, help="experiment file (TOML)")
    r.add_argument("-i", "--inventory", type=Path, required=True,
                   help="Ansible inventory (INI or YAML) of the hosts")
    r.add_argument("--store", metavar="URL",
                   help="the shared store, postgresql://USER@HOST:PORT/DB, reachable from every "
                   "host (password: PGPASSWORD on this machine, handed to the hosts without a "
                   "command line); default: $HUGELAB_STORE, else each host keeps its own SQLite "
                   "file (copy them together with hugelab store copy)")
    r.add_argument("--limit", metavar="PATTERN", help="only these hosts (Ansible's --limit)")
    r.add_argument("--preflight-only", action="store_true",
                   help="install and check only: which hosts would run, which are selected out "
                   "and why; nothing on any host is changed")
    add_json(r)
    r.set_defaults(func=cmd_fleet_run)
    c = fs.add_parser("recover", help="stop hugelab runs on the hosts and put them back",
                      description="On every host (or --limit): stops a running `hugelab run` "
                      "and runs `hugelab recover` (THP modes, pools, leftover workloads).")
    c.add_argument("-i", "--inventory", type=Path, required=True, help="Ansible inventory")
    c.add_argument("--limit", metavar="PATTERN", help="only these hosts (Ansible's --limit)")
    add_json(c)
    c.set_defaults(func=cmd_fleet_recover)


def _store_url(args: argparse.Namespace) -> str | None:
    from hugelab.store.locate import ENV, display, is_url

    url = args.store or os.environ.get(ENV) or None
    if url is not None and not is_url(url):
        raise UsageError(f"--store for a fleet must be a postgresql:// URL, got {display(url)!r}",
                         hint="every host writes into it; leave it out and each host keeps "
                              "its own SQLite file")
    return url


class HostBoard:
    """Per-host progress: a bar of trials (from the shared store) and the host's phase."""

    def __init__(self, progress: Progress, total: int | None) -> None:
        self.progress = progress
        self.total = total
        self.tasks: dict[str, TaskID] = {}
        self.lock = threading.Lock()

    def task(self, host: str) -> TaskID:
        with self.lock:
            if host not in self.tasks:
                self.tasks[host] = self.progress.add_task(escape(host), total=self.total,
                                                          phase="", note="")
            return self.tasks[host]

    def event(self, e: Any) -> None:
        note = e.message.splitlines()[0][:70] if e.message else ""
        self.progress.update(self.task(e.host), phase=f"{e.phase or '-'} {e.status}",
                             note=note)

    def trials(self, counts: dict[str, int]) -> None:
        for host, n in counts.items():
            self.progress.update(self.task(host), completed=n)


def _watch_store(url: str, name: str, board: HostBoard, stop: threading.Event) -> None:
    """Each host's trial count in the shared store, every POLL_S, until `stop`."""
    from hugelab.errors import StoreError
    from hugelab.store.locate import open_store

    try:
        store = open_store(url)
    except StoreError:
        return  # the hosts will say why
    with store:
        while not stop.wait(POLL_S):
            rows = store.tuples("SELECT r.label, COUNT(t.id) FROM runs r LEFT JOIN trials t "
                                "ON t.run_id = r.id WHERE r.name = ? AND r.label != '' "
                                "GROUP BY r.label", (name,))
            board.trials({str(label): int(n) for label, n in rows})


def cmd_fleet_run(args: argparse.Namespace) -> int:
    from hugelab.experiment import load_experiment
    from hugelab.fleet import dispatch

    exp = load_experiment(args.experiment)
    url = _store_url(args)
    con = Console(stderr=True)
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[phase]}"), TextColumn("{task.fields[note]}",
                                                                        markup=False),
                        console=con, transient=False)
    board = HostBoard(progress, exp.blocks * len(exp.arms) if url else None)
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_store, args=(url, exp.name, board, stop),
                               daemon=True) if url else None
    with progress:
        if watcher is not None:
            watcher.start()
        try:
            outcome = dispatch.run_fleet(args.experiment, args.inventory, store_url=url,
                                         limit=args.limit, on_event=board.event,
                                         preflight_only=args.preflight_only)
        finally:
            stop.set()
    result = {"experiment": exp.name, "store": _shown(url), **asdict(outcome)}
    if args.json:
        print_json(result)
    else:
        _print_outcome(outcome, exp.name, url)
    if outcome.interrupted:
        return 130
    return 0 if outcome.ok else 1


def _shown(url: str | None) -> str | None:
    from hugelab.store.locate import display
    return display(url) if url else None


def _print_outcome(outcome: Any, name: str, url: str | None) -> None:
    t = Table(title=f"fleet: {name} on {len(outcome.hosts)} host(s) in {outcome.elapsed_s:.0f} s")
    for col in ("host", "status", "install s", "preflight s", "run s", "why / note"):
        t.add_column(col, justify="right" if col.endswith(" s") else "left")
    for host, o in sorted(outcome.hosts.items()):
        why = "; ".join(f"{a}: {r}" for a, r in o.reasons.items()) or o.message
        t.add_row(escape(host), o.status, *(f"{o.timings[p]:.1f}" if p in o.timings else "-"
                                            for p in ("install", "preflight", "run")),
                  escape(why))
    con = Console()
    con.print(t)
    if url:
        con.print(f"merged report: hugelab report --store {escape(_shown(url) or '')} "
                  f"--experiment {escape(name)}", markup=False)
    if not outcome.ok and not outcome.interrupted:
        con.print("run the same command again to resume the hosts that did not finish",
                  markup=False)


def cmd_fleet_recover(args: argparse.Namespace) -> int:
    from hugelab.fleet import dispatch

    outcome = dispatch.recover_fleet(args.inventory, limit=args.limit)
    if args.json:
        print_json(asdict(outcome))
    else:
        for host, o in sorted(outcome.hosts.items()):
            print(f"{host}: {o.status}{' - ' + o.message if o.message else ''}")
    return 0 if all(o.status == dispatch.RECOVERED for o in outcome.hosts.values()) else 1
