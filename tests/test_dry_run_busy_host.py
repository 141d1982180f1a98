"""The dry run's estimate is a quiet host's; on a busy host it says so, from what the kernel
already averages (CPU pressure over the last minute, the load average), without sampling and
without calling it a warning (a busy host is no fault of the experiment). Measured here (issue
40's journeys): trials in guests under 40-75% CPU pressure took 1.5 to 2 times a quiet host's.
A fake /proc tree gives a quiet and a busy host."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from hugelab.cli.dryrun import busy_line
from hugelab.experiment.parse import parse_experiment
from hugelab.planning.dryrun import plan
from hugelab.trial.load import busy_now
from hugelab.workloads.registry import build_for
from tests.fakehost import make_host

EXPERIMENT = """
name = "busy"
blocks = 1
[workload]
kind = "hugelab-mem"
size = "64M"
[[arms]]
name = "4k"
backing = "4k"
"""
PSI = "some avg10={a:.2f} avg60={a:.2f} avg300=1.00 total=123456\nfull avg10=0.00 avg60=0.00 " \
      "avg300=0.00 total=0\n"


def _host(root: Path, pressure: float, load: float):
    paths = make_host(root, free_kb=8 << 20)
    paths.p("proc/pressure").mkdir(parents=True, exist_ok=True)
    paths.p("proc/pressure/cpu").write_text(PSI.format(a=pressure))
    paths.p("proc/loadavg").write_text(f"{load:.2f} 0.50 0.40 1/300 4242\n")
    return paths


def test_a_quiet_host_says_nothing(tmp_path):
    paths = _host(tmp_path / "root", 3.0, 0.2 * (os.cpu_count() or 1))
    assert busy_now(paths) is None
    exp = parse_experiment(tomllib.loads(EXPERIMENT))
    workload, per_arm = build_for(exp)
    assert plan(exp, workload, per_arm, tmp_path / "none.db", None, paths=paths)[
        "host_busy"] is None


def test_a_busy_host_is_named_beside_the_estimate_not_as_a_warning(tmp_path):
    cpus = os.cpu_count() or 1
    paths = _host(tmp_path / "root", 43.0, 1.6 * cpus)
    exp = parse_experiment(tomllib.loads(EXPERIMENT))
    workload, per_arm = build_for(exp)
    p = plan(exp, workload, per_arm, tmp_path / "none.db", None, paths=paths)
    assert p["host_busy"] == {"cpus": cpus, "cpu_pressure_avg60_pct": 43.0,
                              "loadavg_1m": round(1.6 * cpus, 2)}
    assert not [w for w in p["warnings"] if "busy" in w]
    line = busy_line(p["host_busy"])
    assert "CPU pressure 43% of the last minute" in line and f"on {cpus} CPUs" in line
    assert "twice" in line
    # either reading alone is enough: pressure without load, load without pressure (no PSI)
    assert busy_now(_host(tmp_path / "a", 30.0, 0.1)) is not None
    no_psi = _host(tmp_path / "b", 0.0, 2.0 * cpus)
    no_psi.p("proc/pressure/cpu").unlink()
    assert busy_now(no_psi) == {"cpus": cpus, "loadavg_1m": round(2.0 * cpus, 2)}
