"""`hugelab store copy|info|flush`: move runs between SQLite and PostgreSQL; what a store
holds; write the trials a run kept in its spool while its server store was away."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import asdict

from rich.console import Console
from rich.table import Table

from hugelab.cli.output import action, group, print_json
from hugelab.errors import UsageError

AddOpt = Callable[[argparse.ArgumentParser], None]


def register(sub: argparse._SubParsersAction, add_json: AddOpt, add_store: AddOpt) -> None:
    ss = group(sub, "store", help="copy runs between stores (SQLite, PostgreSQL); store info",
               description="A store is a SQLite file (one host, the default) or a "
               "PostgreSQL database (postgresql://USER@HOST:PORT/DB, shared by a fleet). "
               "Both have the same tables and named migrations.")
    c = action(ss, cmd_copy, "copy",
               help="copy runs from SRC into DST (a run DST has: only what changed)",
               description="Copies runs from one store into another, each run in one "
               "transaction: a laptop's runs into the team's PostgreSQL, or a fleet's "
               "runs into a SQLite file for offline analysis. A run DST already has (same "
               "experiment, same host label) gets the trials it lacks, the later "
               "attempts of trials retried since, and the source's run status: copying "
               "again never duplicates a trial. Passwords come from PGPASSWORD or "
               "~/.pgpass and are never shown.")
    c.add_argument("src", metavar="SRC", help="store to read: a SQLite path or a postgresql:// URL")
    c.add_argument("dst", metavar="DST", help="store to write (created when missing)")
    c.add_argument("--run", type=int, action="append", metavar="ID",
                   help="copy only this run (repeatable; default: every run)")
    add_json(c)
    i = action(ss, cmd_info, "info",
               help="engine, migrations, runs and connection security of a store")
    add_store(i)
    add_json(i)
    f = action(ss, cmd_flush, "flush",
               help="write the trials a run spooled while its store was away",
               description="A run whose PostgreSQL store went away (a restart, a "
               "failover) keeps the trials it measured meanwhile in a local spool "
               "(store-spool.db in hugelab's state directory, mode 0600) and writes them "
               "when the server is back; a run that stopped because the server stayed "
               "away longer than --store-outage leaves them there. This writes them, "
               "each trial exactly once (the next `hugelab run` on that store does the "
               "same). Passwords come from PGPASSWORD or ~/.pgpass.")
    f.add_argument("--store", metavar="URL", default=None,
                   help="only this store's trials (default: every store the spool names)")
    add_json(f)


def cmd_copy(args: argparse.Namespace) -> int:
    from hugelab.store.copy import copy_runs
    from hugelab.store.locate import open_store, same

    if same(args.src, args.dst):
        raise UsageError("SRC and DST are the same store")
    with open_store(args.src, must_exist=True) as src, open_store(args.dst) as dst:
        done = copy_runs(src, dst, args.run)
        names = src.name, dst.name
    if args.json:
        print_json({"source": names[0], "dest": names[1], "runs": [asdict(c) for c in done]})
        return 0
    t = Table(title=f"{names[0]} -> {names[1]}")
    for col in ("run", "into", "name", "label", "trials copied", "already there"):
        numeric = col in ("run", "into", "trials copied", "already there")
        t.add_column(col, justify="right" if numeric else "left")
    for c in done:
        t.add_row(str(c.source_run), f"{c.dest_run}{' (new)' if c.new_run else ''}", c.name,
                  c.label or "-", str(c.trials), str(c.present))
    Console().print(t)
    if not done:
        print("the source store has no runs")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from hugelab.store.locate import open_store

    with open_store(args.store, must_exist=True) as store:
        runs = store.runs()
        info = {"store": store.name, "engine": store.engine,
                "migrations": store.migrations(), "runs": len(runs),
                "trials": sum(r["trials"] for r in runs),
                "labels": sorted({r.get("label") or "" for r in runs} - {""}),
                "tls": getattr(store, "tls", None)}
    if args.json:
        print_json(info)
        return 0
    for k, v in info.items():
        shown = ", ".join(v) if isinstance(v, list) else "n/a (a local file)" if v is None else v
        print(f"{k:>10}: {shown}")
    return 0


def cmd_flush(args: argparse.Namespace) -> int:
    from hugelab.store.locate import display, open_store
    from hugelab.store.spool import Spool

    spool = Spool()
    names = spool.stores() if args.store is None else [display(args.store)]
    done = []
    for name in names:
        if not spool.count(name):
            continue
        with open_store(args.store if args.store is not None else name) as store:
            done.append(spool.flush(name, store))
    left = spool.count()
    if args.json:
        print_json({"spool": str(spool.path), "stores": [asdict(d) for d in done],
                    "left": left})
        return 0
    for d in done:
        print(f"{d.store}: wrote {d.written} trial(s)"
              + (f", {d.present} were there already" if d.present else ""))
    if not done:
        print(f"nothing to write: the spool {spool.path} holds no trial"
              + (f" for {names[0]}" if args.store is not None else ""))
    if left:
        print(f"{left} trial(s) for other stores are still in {spool.path}")
    return 0
