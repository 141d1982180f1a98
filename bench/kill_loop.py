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

With --foreign-holders other users of the 2 MiB pool come and go (bench/foreign_holders.py):
an administrator's pool of 16 persistent pages and 48 overcommit pages is set before the loop
(put back after), and between each start and kill, at a random moment, a holder arrives (a
process faulting in 2-24 pages by a private mapping, one only reserving them, a SysV
SHM_HUGETLB segment attached or held with no process attached, or a real PostgreSQL with
huge_pages = on) or one departs, at most two at a time. They take their pages from wherever
the kernel gives them, the free pages of the pool hugelab raised included. After each recover
(and after the final run) every holder must still map what it held when it came, and the
pool's held pages must be exactly the holders' claims; the host is compared with the 2 MiB
pool by its persistent size (a holder's pages beyond it stay its own, as surplus), and at the
end, the holders gone and the administrator's pool put back, exactly as found. The summary
adds the holders' arrivals (refused ones: the kernel had no pages), departures and modes, the
checks with a holder's pages or the pool disturbed, and the trials that failed because a
holder took their pages (cause "pool": retried on resume, and how many a resume completed).

Needs root. Usage: .venv/bin/python bench/kill_loop.py [--kills 50] [--seed 1]
[--store-restarts] [--foreign-holders] [--json]
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
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.foreign_holders import ForeignHolders, host_differences  # noqa: E402
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
    ap.add_argument("--foreign-holders", action="store_true",
                    help="other users of the 2 MiB pool arrive or depart between each start "
                    "and kill (bench/foreign_holders.py)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with store_server(args.store_restarts) as (url, restart):
        figures = loop(args, url, restart)
    print(json.dumps(figures, indent=1) if args.json else
          "\n".join(f"{k:32s} {v}" for k, v in figures.items()))


@dataclass
class Round:
    """One start-to-kill round's faults, each at its moment after the start."""
    delay: float  # the kill, unless a fault's own time pushes it later
    events: list[tuple[float, str, float]]  # (at, "restart" | "holder", down_s)


def plan_round(rng: random.Random, hrng: random.Random, max_delay: float, restarts: bool,
               holders: bool) -> Round:
    """The kill's delay and the faults before it. The holders draw from their own generator,
    so a seed kills at the same moments with and without them."""
    delay = rng.uniform(0.2, max_delay)
    events = []
    if restarts:
        first = rng.uniform(0.0, delay)
        events.append((first, "restart", rng.uniform(0.0, 2.0)))
    if holders:
        events.append((hrng.uniform(0.0, delay), "holder", 0.0))
    return Round(delay, sorted(events))


def play(r: Round, k: int, restart: Callable[[int, float], None],
         holders: ForeignHolders | None, counts: dict[str, int]) -> None:
    """Sleep to each fault's moment and make it, then to the kill's; the time a fault takes
    beyond its planned downtime (a server's start, a holder's faulting) moves the kill later,
    so the run gets its planned time to work."""
    t0 = time.monotonic()
    late = 0.0
    for at, what, down in r.events:
        time.sleep(max(0.0, t0 + late + at - time.monotonic()))
        began = time.monotonic()
        if what == "restart":
            restart(k, down)
            counts["store_restarts"] += 1
        elif holders is not None:
            holders.event()
        late += max(0.0, time.monotonic() - began - down)
    time.sleep(max(0.0, t0 + late + r.delay - time.monotonic()))


def loop(args: argparse.Namespace, url: str | None,
         restart: Callable[[int, float], None]) -> dict[str, object]:
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="hugelab-kill-loop-"))
    state, db, exp = tmp / "state", tmp / "s.db", tmp / "exp.toml"
    store = url or str(db)
    blocks = max(20, args.kills)
    exp.write_text(EXP.format(blocks=blocks))
    env = {**os.environ, "HUGELAB_STATE_DIR": str(state)}
    found = host_state()  # as found, before the holders' administrator made their pool
    counts = {
        "kills": 0, "store_restarts": 0, "recovers": 0, "plain_reruns": 0,
        "leftover_after_recover": 0, "host_differences_after_recover": 0, "alive_at_kill": 0,
        "recover_failures": 0, "spooled_at_kill": 0, "outages_seen": 0,
        "outages_ridden_out": 0, "holder_checks": 0, "holder_problems": 0}
    seen: set[str] = set()
    differing: dict[str, str] = {}  # host settings that differed (a shared host: who did it?)
    problems: list[str] = []  # holders whose pages changed, a pool whose held pages did
    t0 = time.monotonic()
    with ExitStack() as stack:
        holders = (stack.enter_context(ForeignHolders(random.Random(f"holders-{args.seed}")))
                   if args.foreign_holders else None)
        before = host_state()  # the loop's reference: the administrator's pool included
        for k in range(args.kills):
            said = tmp / f"run-{k}.err"
            with said.open("w") as err:
                p = subprocess.Popen([*HUGELAB, "run", str(exp), "--store", store], env=env,
                                     stdout=subprocess.DEVNULL, stderr=err)
            play(plan_round(rng, holders.rng if holders else rng, args.max_delay, url is not None,
                            holders is not None), k, restart, holders, counts)
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
                recover_and_check(env, toks, before, holders, counts, differing, problems)
            else:
                counts["plain_reruns"] += 1
        r = subprocess.run([*HUGELAB, "run", str(exp), "--store", store, "--json"], env=env,
                           capture_output=True, text=True)
        if holders is not None:  # the final run's pool put back around the holders' pages
            check_holders(holders, counts, problems)
            differing.update(host_differences(before, host_state()))
            counts.update(holders.counts)
    rows = pg_rows(url) if url else store_rows(db)
    keys = [(b, a) for b, a, _ in rows]
    at_end = host_state()  # the holders gone, their administrator's pool put back
    return {
        **counts,
        "holder_modes": holders.modes if holders else {},
        "holder_problem_lines": problems[:10],
        "final_run_exit": r.returncode,
        "trials": len(rows), "expected_trials": blocks * len(ARMS),
        "duplicated": len(keys) - len(set(keys)),
        **history(store),
        "lost": blocks * len(ARMS) - len(set(keys)),
        "not_ok": sum(s != "ok" for *_, s in rows),
        "left_in_spool": _spooled(state),
        "host_differs_at_end": at_end != found,
        "differing_settings": {**differing, **{k: f"{found.get(k)} -> {v}" for k, v
                                               in at_end.items() if found.get(k) != v}},
        "leftover_at_end": len(carrying(seen | tokens(state))),
        "records_left": len(list(state.glob("workload-*.json"))),
        "seconds": round(time.monotonic() - t0, 1),
    }


def recover_and_check(env: dict[str, str], toks: set[str], before: dict[str, str],
                      holders: ForeignHolders | None, counts: dict[str, int],
                      differing: dict[str, str], problems: list[str]) -> None:
    """`hugelab recover`, then count the killed run's processes still alive and the host's
    differences from the loop's start (with holders: their pages aside, and checked)."""
    counts["recovers"] += 1
    r = subprocess.run([*HUGELAB, "recover"], env=env, capture_output=True, text=True)
    counts["recover_failures"] += int(r.returncode != 0)
    time.sleep(0.2)
    counts["leftover_after_recover"] += len(carrying(toks))
    now = host_state()
    if holders is None:
        diff = {k: f"{before.get(k)} -> {now.get(k)}" for k in before.keys() | now.keys()
                if before.get(k) != now.get(k)}
    else:
        diff = host_differences(before, now)
        check_holders(holders, counts, problems)
    counts["host_differences_after_recover"] += int(bool(diff))
    differing.update(diff)


def check_holders(holders: ForeignHolders, counts: dict[str, int], problems: list[str]) -> None:
    counts["holder_checks"] += 1
    found = holders.problems()
    counts["holder_problems"] += int(bool(found))
    problems += found


def history(store: str) -> dict[str, int]:
    """From each trial's earlier attempts: ok trials replaced by another write of themselves (a
    duplicate write), and trials that failed because another user took their pool pages
    (cause "pool"): how many, how many a resume then completed, how many are still failed."""
    from hugelab.store.locate import open_store
    out = {"written_twice": 0, "pool_failed": 0, "pool_failed_completed": 0,
           "pool_failed_left": 0}
    with open_store(store) as s:
        for t in (t for r in s.runs() for t in s.trials(r["id"])):
            earlier = (t["provenance"] or {}).get("earlier_attempts", [])
            out["written_twice"] += any(e.get("status") == "ok" for e in earlier)
            if t["cause"] == "pool" or any(e.get("cause") == "pool" for e in earlier):
                out["pool_failed"] += 1
                ok = t["status"] == "ok"
                out["pool_failed_completed"] += ok
                out["pool_failed_left"] += not ok
    return out


def _spooled(state: Path) -> int:
    from hugelab.store.spool import SPOOL_NAME, Spool
    return Spool(state / SPOOL_NAME).count()


if __name__ == "__main__":
    main()
