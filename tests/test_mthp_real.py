"""Multi-size THP, MADV_COLLAPSE and shmem THP for real on this kernel: the knobs set and
restored (also by `recover` after a SIGKILL), and hugelab-mem trials whose folio evidence
(pagemap + kpageflags) shows what each backing got."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from hugelab.host.paths import REAL, parse_selected
from hugelab.host.session import host_session
from tests.helpers import HUGELAB
from tests.hostguard import host_state, workload_processes

pytestmark = pytest.mark.host

if not REAL.mthp_anon_sizes_kb():
    pytest.skip("this kernel has no multi-size THP", allow_module_level=True)

EXP = """\
name = "mthp-real"
seed = 3
blocks = {blocks}
baseline = "4k"

[workload]
kind = "hugelab-mem"
workload = "chase"
size = "64M"
duration = {duration}

[[arms]]
name = "4k"
backing = "4k"

[[arms]]
name = "64K"
backing = "mthp-64K"

[[arms]]
name = "collapse"
backing = "thp-collapse"

[[arms]]
name = "shmem"
backing = "shmem-thp"
"""


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("HUGELAB_STATE_DIR", str(tmp_path / "state"))
    before = host_state()
    yield tmp_path
    subprocess.run([*HUGELAB, "recover"], check=False, capture_output=True)
    assert host_state() == before


def mode(path) -> str:
    return parse_selected(path.read_text())


def test_each_mthp_size_set_and_restored(env):
    before = host_state()
    sizes = REAL.mthp_anon_sizes_kb()
    with host_session(journal_path=env / "state" / "journal.json") as control:
        for size in sizes:
            new = "always" if mode(REAL.mthp_enabled(size)) != "always" else "never"
            control.set_mthp(size, new)
            assert mode(REAL.mthp_enabled(size)) == new
        control.set_shmem_thp("advise")
        assert mode(REAL.shmem_enabled) == "advise"
        for size in REAL.mthp_sizes_kb():
            if REAL.mthp_shmem_enabled(size).exists():
                control.set_shmem_thp("advise", size)
                assert mode(REAL.mthp_shmem_enabled(size)) == "advise"
        assert host_state() != before
    assert host_state() == before


def test_sigkill_mid_mthp_arm_then_recover_restores(env):
    exp = env / "e.toml"
    # trials of 1.5 s: the arms before mthp-64K pass sooner; the kill comes within 20 ms of
    # its knob being set, while its trial is still to run
    exp.write_text(EXP.format(blocks=2, duration=1.5))
    knob = REAL.mthp_enabled(64)
    was = mode(knob)
    p = subprocess.Popen([*HUGELAB, "run", str(exp), "--store", str(env / "s.db")], cwd=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120

    def arm_on() -> bool:  # hugelab sets 64K, then 2M: the arm is on once both are
        return mode(knob) == "madvise" and mode(REAL.mthp_enabled(2048)) == "never"
    try:
        while time.monotonic() < deadline and not arm_on():
            assert p.poll() is None, "the run ended before its mthp-64K arm"
            time.sleep(0.02)
        assert arm_on(), "the mthp-64K arm's knobs were not set within 120 s"
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert (env / "state" / "journal.json").exists()
    r = subprocess.run([*HUGELAB, "recover"], capture_output=True, text=True, cwd=env)
    assert r.returncode == 0, r.stderr
    assert "hugepages-64kB/enabled = never" in r.stdout
    assert mode(knob) == was and not workload_processes()


def test_new_backings_run_with_evidence(env):
    exp = env / "e.toml"
    exp.write_text(EXP.format(blocks=1, duration=1.5))
    # 64K on for the whole host while it runs: a 4k arm then has folios to prove it has none
    # (hugelab samples folios of a classic arm only while a size below 2M is on)
    knob = REAL.mthp_enabled(64)
    was = parse_selected(knob.read_text())
    knob.write_text("madvise")
    try:
        r = subprocess.run([*HUGELAB, "run", str(exp), "--store", "s.db", "--json"], cwd=env,
                           capture_output=True, text=True)
    finally:
        knob.write_text(was)
    assert r.returncode == 0, r.stderr
    shown = json.loads(subprocess.run([*HUGELAB, "show", "1", "--store", "s.db", "--json"],
                                      cwd=env, capture_output=True, text=True).stdout)
    trials = {t["arm"]: t for t in shown["trials"]}
    assert {a: t["status"] for a, t in trials.items()} == dict.fromkeys(trials, "ok"), \
        {a: t["evidence"].get("reason") for a, t in trials.items()}

    def buffer(arm: str) -> dict:  # hugelab-mem's own census of its buffer
        census = trials[arm]["evidence"]["folios"]
        assert census["source"] == "hugelab-mem"
        return census

    m64 = buffer("64K")
    assert m64["folios_kb"].get("64K", 0) >= 0.9 * m64["present_kb"] > 0
    assert "in 64K folios" in trials["64K"]["evidence"]["reason"]
    assert trials["64K"]["monitors"]["mthp_stats"]["64K"]["anon_fault_alloc"] > 0
    m4k = buffer("4k")
    assert set(m4k["folios_kb"]) == {"4K"} and m4k["present_kb"] > 0
    assert "all in 4K folios" in trials["4k"]["evidence"]["reason"]

    col = trials["collapse"]
    assert col["evidence"]["collapse"]["result"] == "0"  # after up to 3 attempts (EAGAIN)
    assert 1 <= col["evidence"]["collapse"]["attempts"] <= 3
    assert col["evidence"]["collapse"]["before"]["AnonHugePages_kB"] == 0
    assert col["evidence"]["AnonHugePages_kB"] >= 0.9 * col["evidence"]["Rss_kB"]
    assert 0 < col["metrics"]["collapse_s"] < col["metrics"]["setup_s"]
    assert "MADV_COLLAPSE: 0 in" in col["evidence"]["reason"]

    shm = trials["shmem"]["evidence"]
    assert shm["ShmemPmdMapped_kB"] >= 0.9 * shm["Rss_kB"] > 0
