"""What `hugelab fleet run` costs on top of the experiment: per host, Ansible's install check
(warm: hugelab already installed, same source), the preflight, and the run phase against the
same `hugelab run` started directly on this machine; and the merged report's time.

Two SSH "hosts" on this machine's loopback (tests/fleet_hosts.py) write into one real
PostgreSQL store (tests/pg_server.py, durable commits). They share one kernel, so their runs
take turns on hugelab's host lock: the fleet's wall time is about the sum of both runs, where
on real hosts it would be the longest one.

Run as root: .venv/bin/python bench/fleet_overhead.py [--blocks 4] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fleet_hosts import SshFleet  # noqa: E402
from tests.pg_server import running_server  # noqa: E402

HUGELAB = [sys.executable, "-m", "hugelab.cli"]
EXP = """\
name = "fleet-bench"
seed = 3
blocks = {blocks}
[workload]
kind = "hugelab-mem"
workload = "chase"
size = "16M"
duration = 0.2
[[arms]]
name = "4k"
backing = "4k"
[[arms]]
name = "thp"
backing = "thp"
"""


def timed(argv: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    cp = subprocess.run(argv, capture_output=True, text=True, check=True)
    return time.perf_counter() - t0, cp.stdout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    phases: dict[str, list[float]] = {}
    walls, direct, reports = [], [], []
    with tempfile.TemporaryDirectory() as d, running_server(fsync=True) as pg:
        top = Path(d)
        os.environ["PGPASSWORD"] = pg.password
        with SshFleet(top / "hosts", state_dir=top / "state") as fleet:
            inv = fleet.inventory(top / "hosts.ini")
            for i in range(args.repeat):
                url = pg.new_database()
                exp = top / f"e{i}.toml"
                exp.write_text(EXP.format(blocks=args.blocks))
                wall, out = timed([*HUGELAB, "fleet", "run", str(exp), "-i", str(inv),
                                   "--store", url, "--json"])
                walls.append(wall)
                for o in json.loads(out)["hosts"].values():
                    for phase, s in o["timings"].items():
                        phases.setdefault(phase, []).append(s)
                direct.append(timed([*HUGELAB, "run", str(exp), "--store", url, "--label",
                                     "direct", "--json"])[0])
                reports.append(timed([*HUGELAB, "report", "--store", url, "--experiment",
                                      "fleet-bench", "--json"])[0])
    med = statistics.median
    print(f"{args.repeat} fleet runs of 2 hosts x {args.blocks} blocks x 2 arms (medians):")
    print("| what | seconds |\n|---|---|")
    for phase in ("install", "preflight", "run"):
        print(f"| per host: {phase} phase | {med(phases[phase]):.1f} |")
    print(f"| the same `hugelab run` started directly | {med(direct):.1f} |")
    print(f"| `hugelab fleet run`, wall (2 hosts, taking turns on one kernel) | {med(walls):.1f} |")
    print(f"| `hugelab report --experiment` (2 hosts) | {med(reports):.1f} |")


if __name__ == "__main__":
    main()
