"""`hugelab fleet run` end to end, as a user runs it: two SSH hosts (tests/fleet_hosts.py), one
real PostgreSQL store (tests/pg_server.py), one host killed mid-run; the fleet run reports it
and recovers it, a second `fleet run` completes it without a duplicate trial, and `hugelab
report --experiment` merges both hosts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from hugelab.store.locate import open_store
from tests.fleet_hosts import SshFleet
from tests.helpers import HUGELAB
from tests.hostguard import host_state

# 4 blocks, 8 trials a host: a host killed or cut after its second trial still has 6 to resume
# (the two "hosts" take turns on the one kernel, so every trial here is waited for twice)
BLOCKS = 4

EXP = f"""\
name = "fleet-fault"
seed = 7
blocks = {BLOCKS}

[workload]
kind = "hugelab-mem"
workload = "chase"
size = "16M"
duration = 0.4

[[arms]]
name = "4k"
backing = "4k"

[[arms]]
name = "thp"
backing = "thp"
"""


def _trials(url: str, label: str) -> int:
    with open_store(url) as store:
        rows = store.tuples("SELECT COUNT(t.id) FROM runs r JOIN trials t ON t.run_id = r.id "
                            "WHERE r.label = ?", (label,))
    return int(rows[0][0]) if rows else 0


def _kill_when_running(fleet: SshFleet, url: str, host: str, killed: list[int]) -> None:
    """SIGKILL the host's `hugelab run` once it has committed a trial (a host that dies)."""
    pattern = f"{fleet.cache_root}/{host}/.venv/bin/.* run "
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not killed:
        if _trials(url, host) >= 2:
            found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
            pids = [int(p) for p in found.stdout.split()]
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            killed.extend(pids)
        time.sleep(0.2)


def _fleet_run(exp: Path, inv: Path, url: str) -> tuple[int, dict]:
    cp = subprocess.run([*HUGELAB, "fleet", "run", str(exp), "-i", str(inv), "--store", url,
                         "--json"], capture_output=True, text=True, timeout=600)
    assert "Traceback" not in cp.stderr, cp.stderr
    return cp.returncode, json.loads(cp.stdout)


@pytest.mark.slow
@pytest.mark.host
def test_a_killed_host_is_reported_recovered_and_resumed(fleet: SshFleet, tmp_path: Path,
                                                          pg_url: str) -> None:
    before = host_state()
    exp = tmp_path / "fault.toml"
    exp.write_text(EXP)
    inv = fleet.inventory(tmp_path / "hosts.ini")
    killed: list[int] = []
    killer = threading.Thread(target=_kill_when_running, args=(fleet, pg_url, "alpha", killed))
    killer.start()
    rc, first = _fleet_run(exp, inv, pg_url)
    killer.join()
    assert killed, "alpha's run was never seen running"
    alpha, beta = first["hosts"]["alpha"], first["hosts"]["beta"]
    assert rc == 1 and alpha["status"] == "failed" and alpha["recovered"], alpha
    assert beta["status"] == "ok" and beta["result"]["executed"] == 2 * BLOCKS
    assert 2 <= _trials(pg_url, "alpha") < 2 * BLOCKS
    assert host_state() == before  # the rescue put the shared kernel back

    rc, second = _fleet_run(exp, inv, pg_url)
    assert rc == 0, second
    done = {h: o["result"] for h, o in second["hosts"].items()}
    assert done["beta"]["resumed"] and done["beta"]["executed"] == 0
    assert done["alpha"]["resumed"] and 0 < done["alpha"]["executed"] <= 2 * BLOCKS - 2
    with open_store(pg_url) as store:
        runs = {r["label"]: r for r in store.runs()}
        assert set(runs) == {"alpha", "beta"}
        for r in runs.values():
            keys = [(t["block"], t["arm"]) for t in store.trials(r["id"])]
            assert len(keys) == len(set(keys)) == 2 * BLOCKS and r["status"] == "finished"
    assert host_state() == before

    rep = subprocess.run([*HUGELAB, "report", "--store", pg_url, "--experiment", "fleet-fault",
                          "--json", "--html", str(tmp_path / "fleet.html")],
                         capture_output=True, text=True)
    assert rep.returncode == 0, rep.stderr
    merged = json.loads(rep.stdout)
    assert sorted(h["label"] for h in merged["hosts"]) == ["alpha", "beta"]
    assert (tmp_path / "fleet.html").read_text().count("alpha") >= 1


@pytest.mark.slow
@pytest.mark.reads_host  # its preflight reads this host's THP mode
def test_a_relative_inventory_path_is_the_callers(fleet: SshFleet, tmp_path: Path,
                                                   pg_url: str) -> None:
    """The README's form, `-i inv.ini` from the directory holding it, names the hosts in that
    file (ansible-runner alone would look for it in its private data directory and take
    `inv.ini` for a host name); --preflight-only changes nothing on the host."""
    (tmp_path / "fault.toml").write_text(EXP)
    fleet.inventory(tmp_path / "inv.ini")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cp = subprocess.run([*HUGELAB, "fleet", "run", "../fault.toml", "-i", "../inv.ini",
                         "--store", pg_url, "--preflight-only", "--json"], cwd=elsewhere,
                        capture_output=True, text=True, timeout=600)
    assert "Traceback" not in cp.stderr, cp.stderr
    out = json.loads(cp.stdout)
    assert cp.returncode == 0, out
    assert sorted(out["hosts"]) == ["alpha", "beta"]
    assert all(o["status"] == "ok" for o in out["hosts"].values()), out


def _cut_when_running(fleet: SshFleet, url: str, host: str, cut: list[int],
                      stop: threading.Event) -> None:
    """Drop `host` off the network (its sshd and sessions killed) once its run has committed
    two trials; its hugelab run goes on."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not cut and not stop.is_set():
        if _trials(url, host) >= 2:
            cut.extend(fleet.cut(host))
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.host
def test_a_host_lost_mid_run_is_reported_and_resumed_when_back(fleet: SshFleet, tmp_path: Path,
                                                                pg_url: str) -> None:
    """beta stops answering SSH during its run: the fleet run does not wait for it (hard
    timeouts), reports it lost, alpha finishes; with beta's sshd back, a second fleet run
    resumes it to every trial exactly once."""
    before = host_state()
    exp = tmp_path / "lost.toml"
    exp.write_text(EXP)
    inv = fleet.inventory(tmp_path / "hosts.ini")
    cut: list[int] = []
    stop = threading.Event()
    cutter = threading.Thread(target=_cut_when_running, args=(fleet, pg_url, "beta", cut, stop))
    cutter.start()
    try:
        started = time.monotonic()
        rc, first = _fleet_run(exp, inv, pg_url)
        took = time.monotonic() - started
    finally:
        stop.set()
        cutter.join()
        fleet.restore("beta")  # here, on the main thread: see SshFleet.restore
    assert cut, "beta's run was never seen running"
    alpha, beta = first["hosts"]["alpha"], first["hosts"]["beta"]
    assert rc == 1 and alpha["status"] == "ok", first
    assert beta["status"] == "lost" and "hugelab fleet run" in beta["message"], beta
    assert took < 400, f"the fleet run took {took:.0f} s"

    deadline = time.monotonic() + 300  # beta's run went on there: let it end (or not)
    while _trials(pg_url, "beta") < 2 * BLOCKS and time.monotonic() < deadline:
        time.sleep(1)
    rc, second = _fleet_run(exp, inv, pg_url)
    assert rc == 0, second
    assert second["hosts"]["beta"]["result"]["resumed"]
    with open_store(pg_url) as store:
        runs = {r["label"]: r for r in store.runs()}
        for r in runs.values():
            keys = [(t["block"], t["arm"]) for t in store.trials(r["id"])]
            assert len(keys) == len(set(keys)) == 2 * BLOCKS and r["status"] == "finished"
    subprocess.run([*HUGELAB, "recover"], capture_output=True, check=False,
                   env={**os.environ, "HUGELAB_STATE_DIR": str(fleet.state_dir)})
    assert host_state() == before
