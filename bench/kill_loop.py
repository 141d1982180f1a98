"""Kill loop: SIGKILL `hugelab run` at random moments, again and again, and count what it costs.

A 4-arm native run (4k, thp, hugetlb-2M, hugetlb-1G; hugelab-mem chase on 64 MiB) is started,
killed with SIGKILL after a random delay, then either `hugelab recover` is run (odd kills) or
nothing (even kills: the next `hugelab run` must clean up by itself). After each recover the
script counts the killed run's processes still alive (by their trial token) and compares the
host (THP modes, pools, surplus pages, hugetlbfs mounts) with how it was before the loop. At
the end the run is completed and the store is checked for lost or duplicated trials.

Needs root. Usage: .venv/bin/python bench/kill_loop.py [--kills 50] [--seed 1] [--json]
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-delay", type=float, default=4.0, help="longest wait before a kill (s)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="hugelab-kill-loop-"))
    state, db, exp = tmp / "state", tmp / "s.db", tmp / "exp.toml"
    exp.write_text(EXP.format(blocks=max(20, args.kills)))
    env = {**os.environ, "HUGELAB_STATE_DIR": str(state)}
    before = host_state()
    figures = {"kills": 0, "recovers": 0, "plain_reruns": 0, "leftover_after_recover": 0,
               "host_differences_after_recover": 0, "alive_at_kill": 0, "recover_failures": 0}
    seen: set[str] = set()
    t0 = time.monotonic()
    for k in range(args.kills):
        p = subprocess.Popen([*HUGELAB, "run", str(exp), "--store", str(db)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.2, args.max_delay))
        toks = tokens(state)
        seen |= toks
        p.send_signal(signal.SIGKILL)
        p.wait()
        figures["kills"] += 1
        figures["alive_at_kill"] += len(carrying(toks))  # before anything cleans up
        if k % 2:
            figures["recovers"] += 1
            r = subprocess.run([*HUGELAB, "recover"], env=env, capture_output=True, text=True)
            figures["recover_failures"] += r.returncode != 0
            time.sleep(0.2)
            figures["leftover_after_recover"] += len(carrying(toks))
            figures["host_differences_after_recover"] += host_state() != before
        else:
            figures["plain_reruns"] += 1
    r = subprocess.run([*HUGELAB, "run", str(exp), "--store", str(db), "--json"], env=env,
                       capture_output=True, text=True)
    rows = store_rows(db)
    keys = [(b, a) for b, a, _ in rows]
    blocks = max(20, args.kills)
    figures.update({
        "final_run_exit": r.returncode,
        "trials": len(rows), "expected_trials": blocks * len(ARMS),
        "duplicated": len(keys) - len(set(keys)),
        "lost": blocks * len(ARMS) - len(set(keys)),
        "not_ok": sum(s != "ok" for *_, s in rows),
        "host_differs_at_end": host_state() != before,
        "leftover_at_end": len(carrying(seen | tokens(state))),
        "records_left": len(list(state.glob("workload-*.json"))),
        "seconds": round(time.monotonic() - t0, 1),
    })
    print(json.dumps(figures, indent=1) if args.json else
          "\n".join(f"{k:32s} {v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
