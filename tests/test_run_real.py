"""`hugelab run` for real on this host: end to end, SIGKILL + recover + resume, bad input."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time

import pytest

from hugelab.host.paths import REAL, parse_selected
from tests.helpers import HUGELAB
from tests.hostguard import host_state

pytestmark = [pytest.mark.host, pytest.mark.slow]

SMALL = """\
name = "small"
seed = 5
blocks = {blocks}
baseline = "4k"

[workload]
kind = "hugelab-mem"
workload = "chase"
size = "64M"
duration = 0.3

[[arms]]
name = "4k"
backing = "4k"

[[arms]]
name = "thp-always"
backing = "thp"
thp = "always"

[[arms]]
name = "2M"
backing = "hugetlb-2M"
"""


@pytest.fixture
def env(tmp_path, monkeypatch):
    state = tmp_path / "state"
    monkeypatch.setenv("HUGELAB_STATE_DIR", str(state))
    before = host_state()
    yield tmp_path
    subprocess.run([*HUGELAB, "recover"], check=False, capture_output=True)
    assert host_state() == before


def hugelab(*args, cwd):
    return subprocess.run([*HUGELAB, *args], capture_output=True, text=True, cwd=cwd)


def trial_keys(db):
    try:
        with sqlite3.connect(db) as c:
            return [tuple(r) for r in c.execute("SELECT run_id, block, arm FROM trials")]
    except sqlite3.OperationalError:  # the store file exists before its tables do
        return []


def test_run_small_experiment_end_to_end(env):
    exp = env / "small.toml"
    exp.write_text(SMALL.format(blocks=3))
    r = hugelab("run", str(exp), "--store", "s.db", "--json", cwd=env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    arms = {a["arm"]: a for a in out["arms"]}
    assert all(arms[a]["n"] == 3 and arms[a]["flagged"] == 0 for a in arms), arms
    # machinery, not noise: 3 blocks of 0.3 s on a shared VM read 2M anywhere from 0.86x to
    # 1.3x (issue 20), so the test asserts a speedup was computed, not its direction
    assert 0.0 < arms["2M"]["speedup"] < 100.0
    shown = json.loads(hugelab("show", "1", "--store", "s.db", "--json", cwd=env).stdout)
    thp = [t for t in shown["trials"] if t["arm"] == "thp-always"][0]
    assert thp["evidence"]["AnonHugePages_kB"] > 0 and thp["provenance"]["thp"] == "always"
    two = [t for t in shown["trials"] if t["arm"] == "2M"][0]
    assert two["evidence"]["KernelPageSize_kB"] == 2048 and two["evidence"]["check"] == "verified"
    assert "vmstat" in two["monitors"]
    load = two["monitors"]["load"]  # the machine's load while the trial ran, as evidence
    assert 0.0 <= load["steal_share"] <= 1.0 and 0.0 <= load["other_busy_share"] <= 1.0


def test_sigkill_then_recover_then_resume_without_duplicates(env):
    exp = env / "small.toml"
    exp.write_text(SMALL.format(blocks=4))
    db = env / "s.db"
    p = subprocess.Popen([*HUGELAB, "run", str(exp), "--store", str(db)], cwd=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until trials are committed and the host changed
        if db.exists() and len(trial_keys(db)) >= 2 and (env / "state" / "journal.json").exists():
            break
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert (env / "state" / "journal.json").exists()
    assert int(REAL.pool_file(2048).read_text()) > 0  # the killed run left its pool behind
    done = len(trial_keys(db))
    r = hugelab("recover", cwd=env)
    assert r.returncode == 0, r.stderr
    assert "nr_hugepages" in r.stdout
    assert not (env / "state" / "journal.json").exists()
    r = hugelab("run", str(exp), "--store", str(db), "--json", cwd=env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["resumed"] and out["executed"] == 12 - done
    keys = trial_keys(db)
    assert len(keys) == len(set(keys)) == 12


def test_sigterm_restores_at_once(env):
    exp = env / "small.toml"
    exp.write_text(SMALL.format(blocks=20))
    p = subprocess.Popen([*HUGELAB, "run", str(exp), "--store", "s.db"], cwd=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (env / "state" / "journal.json").exists():
        time.sleep(0.05)
    time.sleep(0.5)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 143 and "restored" in err
    assert not (env / "state" / "journal.json").exists()
    assert parse_selected(REAL.thp_enabled.read_text()) == "madvise"


@pytest.mark.parametrize("text,code,words", [
    ("[[arms]]\nname = 'a'\nbacking = 'hugetlb-4G'\n", 2, "line 3: arm 'a': unknown backing"),
    ("blocks = = 1", 2, "not valid TOML"),
    ("[[arms]]\nname='a'\nbacking='4k'\n[workload]\nkind='nope'\n", 2, "nope"),
])
def test_bad_experiment_files(env, text, code, words):
    f = env / "bad.toml"
    f.write_text(text)
    r = hugelab("run", str(f), "--store", "s.db", cwd=env)
    assert r.returncode == code and words in r.stderr and "Traceback" not in r.stderr


def test_run_refuses_without_root(env):
    os.chmod(env, 0o777)
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *HUGELAB,
                        "run", "--store", "s.db"], capture_output=True, text=True, cwd=env)
    assert r.returncode == 3 and "needs root" in r.stderr
