"""The THP shrinker knobs and memory_limit on this host for real: khugepaged/max_ptes_none and
shrink_underused set, journaled and put back (session end, `hugelab host restore`); a real
trial under a memory limit, read from the trial cgroup's own counters by the test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hugelab import proc
from hugelab.experiment import load_experiment
from hugelab.host import memcg
from hugelab.host.control import HostControl
from hugelab.host.journal import Journal
from hugelab.host.paths import REAL
from hugelab.host.session import host_session
from hugelab.runner import Runner
from hugelab.store.locate import open_store
from hugelab.trial.native import NativeTarget
from hugelab.workloads.registry import build_for
from tests.helpers import HUGELAB
from tests.hostguard import host_state, hugelab_memcgs

pytestmark = pytest.mark.host
needs_knobs = pytest.mark.skipif(not REAL.shrink_underused.exists() or memcg.find(REAL) is None,
                                 reason="needs Linux 6.12+ (shrink_underused) and a memory "
                                        "cgroup controller")


@pytest.fixture(autouse=True)
def unchanged_host(tmp_path, monkeypatch):
    monkeypatch.setenv("HUGELAB_STATE_DIR", str(tmp_path / "state"))
    before = host_state()
    yield
    proc.join_cgroup(None)
    if host_state() != before:  # put it back for the next test, then fail loudly
        subprocess.run([*HUGELAB, "host", "restore"], check=False)
        subprocess.run([*HUGELAB, "recover"], check=False)
    assert host_state() == before


def knobs() -> tuple[str, str]:
    return REAL.max_ptes_none.read_text().strip(), REAL.shrink_underused.read_text().strip()


@needs_knobs
def test_knobs_set_in_a_session_and_put_back_at_its_end(tmp_path):
    found = knobs()
    other = "0" if found[1] == "1" else "1"
    with host_session(REAL, tmp_path / "state" / "journal.json") as c:
        c.set_max_ptes_none(409)
        c.set_shrink_underused(other == "1")
        cg = c.set_memory_limit(64 << 20)
        assert knobs() == ("409", other)
        assert cg is not None and cg.is_dir()
        assert (cg / memcg.find(REAL).limit_file).read_text().strip() == str(64 << 20)
    assert knobs() == found and not cg.exists() and not cg.parent.exists()


@needs_knobs
def test_cli_host_restore_and_recover_put_back_a_kept_journal(tmp_path):
    """`hugelab host restore` replays the journal of `hugelab host set` (host-set.json) and
    `hugelab recover` a run's (journal.json): both put back these changes."""
    found = knobs()
    for journal, command in (("host-set.json", "host restore"), ("journal.json", "recover")):
        c = HostControl(REAL, Journal(tmp_path / "state" / journal))
        kept_by_a_gone_hugelab(c, found, command.split())


def kept_by_a_gone_hugelab(c: HostControl, found: tuple[str, str], command: list[str]) -> None:
    c.journal.owner = 1  # as if the hugelab that made them were gone
    c.set_max_ptes_none(400)
    c.set_shrink_underused(found[1] != "1")
    cg = c.set_memory_limit(32 << 20)
    proc.join_cgroup(None)  # as if this hugelab were gone: only the journal knows
    assert knobs() != found and hugelab_memcgs()
    r = subprocess.run([*HUGELAB, *command], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "removed memory cgroup" in r.stdout and "max_ptes_none = " in r.stdout, r.stdout
    assert knobs() == found and cg is not None and not cg.parent.exists()


ALLOC = ("import os; b = bytearray({mib} << 20); b[::4096] = b'x' * len(b[::4096]); "
         "print(open('/proc/self/cgroup').read())")
EXP = """\
name = "memlimit"
seed = 3
blocks = 1
baseline = "free"

[workload]
kind = "command"
argv = ["{python}", "-c", "{code}"]
timeout_s = 60

[[arms]]
name = "free"
backing = "4k"

[[arms]]
name = "roomy"
backing = "4k"
memory_limit = "256M"

[[arms]]
name = "tight"
backing = "4k"
memory_limit = "64M"
"""


@needs_knobs
def test_a_trial_runs_under_its_memory_limit(tmp_path):
    """A workload that writes 96 MiB: under 256M its cgroup's own counters saw all of it
    (the peak is above 96 MiB, so the process was charged there from its first page), under
    64M the limit held: the peak stopped at the limit, charges hit it, the OOM killer ended
    it, and the trial failed; without a limit it ran as always."""
    exp_file = tmp_path / "e.toml"
    exp_file.write_text(EXP.format(python=sys.executable, code=ALLOC.format(mib=96)))
    exp = load_experiment(exp_file)
    workload, per_arm = build_for(exp)
    seen: dict[str, dict[str, float]] = {}

    def progress(e):
        if e.kind == "trial" and e.trial:  # before the next arm's apply removes the cgroup
            seen[e.trial.arm] = memcg.trial_counters()

    with open_store(tmp_path / "s.db") as store:
        out = Runner(exp, store, workload, target=NativeTarget(), workloads=per_arm,
                     progress=progress).run()
        trials = {t["arm"]: t for t in store.trials(out.run_id)}
    assert seen["free"] == {}
    roomy, tight = seen["roomy"], seen["tight"]
    assert roomy["memcg_limit_bytes"] == 256 << 20 and roomy["memcg_oom_kill"] == 0
    assert 96 << 20 < roomy["memcg_peak_bytes"] < 256 << 20, roomy
    assert tight["memcg_limit_bytes"] == 64 << 20
    assert tight["memcg_oom_kill"] >= 1 and tight["memcg_limit_hits"] > 0, tight
    assert (64 << 20) - (1 << 20) <= tight["memcg_peak_bytes"] <= 64 << 20, tight
    assert trials["free"]["status"] == trials["roomy"]["status"] == "ok"
    assert trials["tight"]["status"] == "failed"
    assert not hugelab_memcgs()  # the run's end removed its cgroups


def test_trial_counters_without_a_limit_are_empty():
    proc.join_cgroup(None)
    assert memcg.trial_counters() == {}
    assert json.dumps(memcg.state(REAL))  # what inspect shows is JSON


def test_workloads_outside_a_trial_never_join(tmp_path):
    """join_cgroup names a cgroup for trial processes only: a helper spawned outside any
    trial scope stays in hugelab's cgroup."""
    proc.join_cgroup(tmp_path / "no-such-cgroup" / "cgroup.procs")
    p = proc.spawn([sys.executable, "-c", "pass"])
    assert p.wait() == 0
    assert Path(f"/proc/{os.getpid()}").exists()
