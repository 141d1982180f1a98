"""PostgreSQL inside hugelab's own guests: the guest sees the host's root, so the same hugelab
runs the trial there (workloads/postgres/inguest.py) on the template built on the host, and
the segment's evidence is the guest's own smaps."""

from __future__ import annotations

import glob
import json
import subprocess
import sys
from pathlib import Path

import pytest

from hugelab.workloads.base import WorkloadResult
from hugelab.workloads.postgres import guestio
from hugelab.workloads.postgres.cluster import installed
from hugelab.workloads.postgres.workload import Postgres
from tests.hostguard import host_state

EXP = """\
name = "pg-guest"
seed = 4
blocks = 1
baseline = "off"
[vm]
mem = "1G"
vcpus = 1
accel = "auto"
[workload]
kind = "postgres"
builtin = "select-only"
scale = 1
clients = 2
threads = 1
duration_s = 2
warmup_s = 0
[[arms]]
name = "off"
backing = "4k"
app = { huge_pages = "off", shared_buffers = "32MB" }
[arms.vm]
backing = "anon"
[[arms]]
name = "on"
backing = "hugetlb-2M"
app = { huge_pages = "on", shared_buffers = "32MB" }
[arms.vm]
backing = "anon"
"""


def test_the_guest_side_gets_the_same_workload_and_hands_back_its_result():
    pg = Postgres(scale=3, clients=2, threads=1, app=(("shared_buffers", "64MB"),),
                  arm_backing="hugetlb-2M")
    table = json.loads(guestio.params(pg))
    table["app"] = tuple(tuple(kv) for kv in table["app"])
    assert Postgres(**table) == pg
    res = WorkloadResult({"tps": 10.0}, "tps", "transactions/s", "higher",
                         {"KernelPageSize_kB": 2048}, {"tool": "pgbench"})
    out = f"some server chatter\n{guestio.encode(res)}\n"
    assert guestio.decode(out) == res and guestio.decode("no result here") is None


@pytest.mark.vm
@pytest.mark.host
@pytest.mark.slow
@pytest.mark.skipif(not installed(), reason="Debian package postgresql not installed")
def test_off_and_on_in_a_guest_each_verified_from_the_guests_own_smaps(tmp_path):
    exp = tmp_path / "exp.toml"
    exp.write_text(EXP)
    env_state = tmp_path / "state"
    before, dirs = host_state(), set(glob.glob("/var/tmp/hugelab-postgres/trial-*"))
    r = subprocess.run([sys.executable, "-m", "hugelab.cli", "run", str(exp), "--store",
                        str(tmp_path / "s.db"), "--json"], capture_output=True, text=True,
                       env={**__import__("os").environ, "HUGELAB_STATE_DIR": str(env_state)},
                       timeout=600)
    assert r.returncode == 0, r.stderr
    shown = subprocess.run([sys.executable, "-m", "hugelab.cli", "show", "1", "--store",
                            str(tmp_path / "s.db"), "--json"], capture_output=True, text=True)
    trials = {t["arm"]: t for t in json.loads(shown.stdout)["trials"]}
    for arm, page_kb in (("off", 4), ("on", 2048)):
        t = trials[arm]
        assert t["status"] == "ok" and t["evidence"]["check"] == "verified", t["evidence"]
        assert t["evidence"]["KernelPageSize_kB"] == page_kb, t["evidence"]
        assert t["provenance"]["where"] == "guest" and t["value"] > 0
    assert host_state() == before  # the guest's pool was the guest's; the host's is as found
    assert set(glob.glob("/var/tmp/hugelab-postgres/trial-*")) == dirs  # written in the guest
    assert not Path(env_state / "journal.json").exists()
