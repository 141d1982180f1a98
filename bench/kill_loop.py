"""Kill loop: SIGKILL `hugelab run` at random moments, again and again, and count what it costs.

A 4-arm native run (4k, thp, hugetlb-2M, hugetlb-1G; hugelab-mem chase on 64 MiB) is started,
killed with SIGKILL after a random delay, then either `hugelab recover` is run (odd kills) or
nothing (even kills: the next `hugelab run` must clean up by itself). After each recover the
script counts the killed run's processes still alive (by their trial token) and compares the
host (THP modes, pools, surplus pages, hugetlbfs mounts) with how it was before the loop. At
the end the run is completed and the store is checked for lost or duplicated trials.

With --store-restarts the store is a real PostgreSQL (tests/pg_server.py, huge_pages off)
that is restarted once between each start and kill, at a random moment (fast and immediate
shutdowns in turn, down 0-2 s): the run rides it out (its trials spooled meanwhile), and a
kill may land while trials wait in the spool, which the next run writes. The end checks add
trials written twice (an ok trial replaced) and trials left in the spool.

Needs root. Usage: .venv/bin/python bench/kill_loop.py [--kills 50] [--seed 1]
[--store-restarts] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.hostguard import carrying, host_state  # noqa: E402

HUGELAB = [sys.executable, "-m", "hugelab.cli"]
ARMS = ("4k", "thp", "hugetlb-2M", "hugetlb-1G")
EXP = """\
name = "kill-loop"
seed = 11
blocks = {blocks}
baseline = "4k"
[workload]
kind = "hugelab-mem"
workload = "chase"
size = "64M"
duration = 0.3
""" + "".join(f'[[arms]]\nname = "{a}"\nbacking = "{a}"\n' + ('thp = "always"\n' if a == "thp"
                                                           else "") for a in ARMS)


def tokens(state: Path) -> set[str]:
    out = set()
    for p in state.glob("workload-*.json"):
        try:
            out.add(json.loads(p.read_text())["token"])
        except (OSError, ValueError, KeyError):
            continue
    return out


def store_rows(db: Path) -> list[tuple[int, str, str]]:
    try:
        with sqlite3.connect(db) as c:
            return list(c.execute("SELECT block, arm, status FROM trials"))
    except sqlite3.Error:
        return []


def written_twice(store: str) -> int:
    """Ok trials that were replaced by another write of themselves (a duplicate write)."""
    from hugelab.store.locate import open_store
    with open_store(store) as s:
        return sum(1 for r in s.runs() for t in s.trials(r["id"])
                   if any(e.get("status") == "ok"
                          for e in (t["provenance"] or {}).get("earlier_attempts", [])))


def pg_rows(url: str) -> list[tuple[int, str, str]]:
    from hugelab.store.locate import open_store
    with open_store(url) as s:
        return [(int(b), str(a), str(st)) for b, a, st in
                s.tuples("SELECT block, arm, status FROM trials")]


@contextmanager
def store_server(restarts: bool) -> Iterator[tuple[str | None, Callable[[int, float], None]]]:
    """(the store URL, restart(k, down_s)): a real PostgreSQL with --store-restarts, else no
    URL (a SQLite file) and a restart that does nothing."""
    if not restarts:
        yield None, lambda _k, _down: None
        return
    from tests.pg_server import running_server
    with running_server() as srv:  # huge_pages = off: it takes nothing from the pools
        os.environ["PGPASSWORD"] = srv.password

        def restart(k: int, down_s: float) -> None:
            srv.restart("fast" if k % 2 == 0 else "immediate", down_s)
        yield srv.new_database(), restart


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-delay", type=float, default=4.0, help="longest wait before a kill (s)")
    ap.add_argument("--store-restarts", action="store_true",
                    help="a PostgreSQL store, restarted between each start and kill")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with store_server(args.store_restarts) as (url, restart):
        figures = loop(args, url, restart)
    print(json.dumps(figures, indent=1) if args.json else
          "\n".join(f"{k:32s} {v}" for k, v in figures.items()))


def loop(args: argparse.Namespace, url: str | None,
         restart: Callable[[int, float], None]) -> dict[str, object]:
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="hugelab-kill-loop-"))
    state, db, exp = tmp / "state", tmp / "s.db", tmp / "exp.toml"
    store = url or str(db)
    exp.write_text(EXP.format(blocks=max(20, args.kills)))
    env = {**os.environ, "HUGELAB_STATE_DIR": str(state)}
    before = host_state()
    counts = {
        "kills": 0, "store_restarts": 0, "recovers": 0, "plain_reruns": 0,
        "leftover_after_recover": 0, "host_differences_after_recover": 0, "alive_at_kill": 0,
        "recover_failures": 0, "spooled_at_kill": 0, "outages_seen": 0,
        "outages_ridden_out": 0}
    seen: set[str] = set()
    differing: dict[str, str] = {}  # host settings that differed (a shared host: who did it?)
    t0 = time.monotonic()
    for k in range(args.kills):
        said = tmp / f"run-{k}.err"
        with said.open("w") as err:
            p = subprocess.Popen([*HUGELAB, "run", str(exp), "--store", store], env=env,
                                 stdout=subprocess.DEVNULL, stderr=err)
        delay = rng.uniform(0.2, args.max_delay)
        if url:  # the store goes away and comes back at a random moment before the kill
            first = rng.uniform(0.0, delay)
            time.sleep(first)
            down = rng.uniform(0.0, 2.0)
            restart(k, down)
            counts["store_restarts"] += 1
            delay = max(0.0, delay - first - down)
        time.sleep(delay)
        toks = tokens(state)
        seen |= toks
        p.send_signal(signal.SIGKILL)
        p.wait()
        counts["kills"] += 1
        counts["spooled_at_kill"] += _spooled(state)  # measured while away, not yet written
        text = said.read_text(errors="replace")
        counts["outages_seen"] += "riding it out" in text
        counts["outages_ridden_out"] += "is back after" in text
        counts["alive_at_kill"] += len(carrying(toks))  # before anything cleans up
        if k % 2:
            counts["recovers"] += 1
            r = subprocess.run([*HUGELAB, "recover"], env=env, capture_output=True, text=True)
            counts["recover_failures"] += int(r.returncode != 0)
            time.sleep(0.2)
            counts["leftover_after_recover"] += len(carrying(toks))
            now = host_state()
            counts["host_differences_after_recover"] += int(now != before)
            differing.update({k: f"{before.get(k)} -> {now.get(k)}" for k in before.keys()
                              | now.keys() if before.get(k) != now.get(k)})
        else:
            counts["plain_reruns"] += 1
    r = subprocess.run([*HUGELAB, "run", str(exp), "--store", store, "--json"], env=env,
                       capture_output=True, text=True)
    rows = pg_rows(url) if url else store_rows(db)
    keys = [(b, a) for b, a, _ in rows]
    blocks = max(20, args.kills)
    return {
        **counts,
        "final_run_exit": r.returncode,
        "trials": len(rows), "expected_trials": blocks * len(ARMS),
        "duplicated": len(keys) - len(set(keys)),
        "written_twice": written_twice(store),
        "lost": blocks * len(ARMS) - len(set(keys)),
        "not_ok": sum(s != "ok" for *_, s in rows),
        "left_in_spool": _spooled(state),
        "host_differs_at_end": host_state() != before,
        "differing_settings": {**differing, **{k: f"{before.get(k)} -> {v}" for k, v
                                               in host_state().items() if before.get(k) != v}},
        "leftover_at_end": len(carrying(seen | tokens(state))),
        "records_left": len(list(state.glob("workload-*.json"))),
        "seconds": round(time.monotonic() - t0, 1),
    }


def _spooled(state: Path) -> int:
    from hugelab.store.spool import SPOOL_NAME, Spool
    return Spool(state / SPOOL_NAME).count()


if __name__ == "__main__":
    main()
