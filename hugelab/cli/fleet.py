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
from rich.table import Column, Table

from hugelab.cli.output import action, group, print_json
from hugelab.cli.run import DEFAULT_OUTAGE_S, outage_arg
from hugelab.errors import UsageError

AddOpt = Callable[[argparse.ArgumentParser], None]
POLL_S = 2.0  # how often the shared store is asked for each host's trial count


def register(sub: argparse._SubParsersAction, add_json: AddOpt) -> None:
    fs = group(sub, "fleet", help="run one experiment on many hosts (Ansible) into one store",
               description="Many hosts, one answer: Ansible (over SSH, with the "
               "credentials of your inventory, ~/.ssh, ssh-agent or vault) installs "
               "hugelab on every host with its ./bootstrap, copies the experiment, "
               "selects out the hosts that cannot run an arm (no pdpe1gb, too little "
               "memory for a pool, no KVM: before any change, with the reason), runs it "
               "on the others in parallel, each host its own run labelled by its "
               "inventory name, and recovers a host whose run fails. Then `hugelab "
               "report --store URL --experiment NAME` merges them.")
    r = action(fs, cmd_fleet_run, "run", help="run EXPERIMENT on every host of INVENTORY",
               description="Runs EXPERIMENT on every host of an Ansible inventory. "
               "Running the same command again resumes every host where it stopped "
               "(no trial is repeated). Ctrl-C stops the hosts' runs and puts them back. "
               "Exits 0 when every host ran (or was selected out), 1 when a host failed "
               "or was unreachable, 130 when interrupted. A host that stops answering "
               "during its run is reported lost (its run may go on there) and the "
               "others go on; the next fleet run resumes it.")
    r.add_argument("experiment", type=Path, help="experiment file (TOML)")
    r.add_argument("-i", "--inventory", type=Path, required=True,
                   help="Ansible inventory (INI or YAML) of the hosts")
    r.add_argument("--store", metavar="URL",
                   help="the shared store, postgresql://USER@HOST:PORT/DB, reachable from every "
                   "host (password: PGPASSWORD on this machine, handed to the hosts without a "
                   "command line); default: $HUGELAB_STORE, else each host keeps its own SQLite "
                   "file (copy them together with hugelab store copy)")
    r.add_argument("--store-outage", type=outage_arg, default=DEFAULT_OUTAGE_S,
                   metavar="DURATION",
                   help="with --store: how long the shared store may be away (a restart, a "
                   "failover) before a host's run stops (default 5m); each host keeps its "
                   "trials in a local spool meanwhile (hugelab run --store-outage)")
    r.add_argument("--limit", metavar="PATTERN", help="only these hosts (Ansible's --limit)")
    r.add_argument("--blocks", type=int, metavar="N",
                   help="override the file's number of blocks on every host (a quick look first)")
    r.add_argument("--preflight-only", action="store_true",
                   help="install hugelab and check only: which hosts would run, which are "
                   "selected out and why; no host's huge-page settings are changed and nothing "
                   "is run")
    add_json(r)
    c = action(fs, cmd_fleet_recover, "recover",
               help="stop hugelab runs on the hosts and put them back",
               description="On every host (or --limit): stops a running `hugelab run` "
               "and runs `hugelab recover` (THP modes, pools, leftover workloads).")
    c.add_argument("-i", "--inventory", type=Path, required=True, help="Ansible inventory")
    c.add_argument("--limit", metavar="PATTERN", help="only these hosts (Ansible's --limit)")
    add_json(c)


def _store_url(args: argparse.Namespace) -> str | None:
    from hugelab.store.locate import ENV, display, is_url

    if args.store is None:  # $HUGELAB_STORE names a shared store, or this machine's file
        env = os.environ.get(ENV) or None
        return env if env is not None and is_url(env) else None
    if not is_url(args.store):
        raise UsageError(f"--store for a fleet must be a postgresql:// URL, got "
                         f"{display(args.store)!r}", hint="every host writes into it; leave it "
                         "out and each host keeps its own SQLite file")
    return str(args.store)


def _check_store(url: str, con: Console) -> None:
    """Open the shared store here before any host is touched: a wrong URL, password or an
    unreachable server fails once, not on every host after its install."""
    from hugelab.store.locate import open_store

    open_store(url).close()
    if not os.environ.get("PGPASSWORD"):
        con.print("note: PGPASSWORD is not set here, so no password is handed to the hosts: "
                  "each host needs its own ~/.pgpass (or a server that trusts it)", markup=False)


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


def _watch_store(url: str, key: str, board: HostBoard, stop: threading.Event) -> None:
    """Each host's trial count of this experiment's labelled runs in the shared store, every
    POLL_S, until `stop`. The display is a convenience: a store error ends it quietly
    (the hosts report their own)."""
    from hugelab.errors import StoreError
    from hugelab.store.locate import open_store

    try:
        with open_store(url) as store:
            while not stop.wait(POLL_S):
                board.trials(store.trials_by_label(key))
    except StoreError:
        return


def host_run_args(args: argparse.Namespace, blocks: int, url: str | None) -> list[str]:
    """The `hugelab run` arguments every host gets beside its label (pure)."""
    out = ["--blocks", str(blocks)] if args.blocks else []
    if url:
        out += ["--store-outage", f"{args.store_outage:g}"]
    return out


def cmd_fleet_run(args: argparse.Namespace) -> int:
    from hugelab.experiment import Experiment, load_experiment
    from hugelab.fleet import dispatch

    exp = load_experiment(args.experiment)
    if args.blocks is not None and args.blocks < 1:
        raise UsageError("the number of blocks must be at least 1")
    if args.blocks:
        exp = Experiment(**{**exp.__dict__, "blocks": args.blocks})  # as `hugelab run --blocks`
    url = _store_url(args)
    con = Console(stderr=True)
    if url:
        _check_store(url, con)
    progress = _progress(con, _host_names(args.inventory))
    total = exp.blocks * sum(len(a.targets()) for a in exp.arms)  # trials, one per guest
    board = HostBoard(progress, total if url else None)
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_store, args=(url, exp.key(), board, stop),
                               daemon=True) if url else None
    with progress:
        if watcher is not None:
            watcher.start()
        try:
            outcome = dispatch.run_fleet(args.experiment, args.inventory, store_url=url,
                                         limit=args.limit, on_event=board.event,
                                         preflight_only=args.preflight_only,
                                         run_args=host_run_args(args, exp.blocks, url))
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


def _progress(con: Console, names: list[str]) -> Progress:
    """One line per host: its name in full, its trials, its phase, the last thing it said."""
    width = max([len(n) for n in names] + [4])
    return Progress(TextColumn("[bold]{task.description}", table_column=Column(min_width=width)),
                    BarColumn(bar_width=20), MofNCompleteColumn(),
                    TextColumn("{task.fields[phase]}", table_column=Column(min_width=20)),
                    TextColumn("{task.fields[note]}", markup=False,
                               table_column=Column(overflow="ellipsis", no_wrap=True)),
                    console=con, transient=False)


def _host_names(inventory: Path) -> list[str]:
    """Host names for the display's width (a guess from the file: Ansible parses it)."""
    try:
        words = [ln.split()[0] for ln in inventory.read_text().splitlines()
                 if ln.strip() and not ln.lstrip().startswith(("#", ";", "["))]
    except (OSError, UnicodeDecodeError):
        return []
    return [w for w in words if "=" not in w][:200]


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
