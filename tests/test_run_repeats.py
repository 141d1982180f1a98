"""`hugelab run --repeats R --repeat-pause S`: bad input, the dry run, and (host) a real run
whose repeats are stored as one run and combined in its report."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.helpers import HUGELAB, cli
from tests.hostguard import host_state

SMALL = """\
name = "repeats"
seed = 5
blocks = 2
baseline = "4k"

[workload]
kind = "hugelab-mem"
workload = "chase"
size = "16M"
duration = 0.2

[[arms]]
name = "4k"
backing = "4k"

[[arms]]
name = "2M"
backing = "hugetlb-2M"
"""


@pytest.mark.parametrize(("args", "words"), [
    (["--repeats", "0"], "--repeats must be at least 1"),
    (["--repeats", "2", "--repeat-pause", "-1"], "--repeat-pause must be 0 or more"),
    (["--repeats", "2", "--repeat-pause", "nan"], "--repeat-pause must be 0 or more"),
    (["--repeats", "2", "--until-verdict"], "does not combine with repeats"),
])
def test_bad_repeat_options_are_usage_errors(tmp_path, capsys, args, words):
    (tmp_path / "e.toml").write_text(SMALL)
    rc, _, err = cli(["run", str(tmp_path / "e.toml"), "--store", str(tmp_path / "s.db"),
                      *args], capsys)
    assert rc == 2 and words in err and "Traceback" not in err


def test_repeats_in_the_file_and_the_dry_run_counts_them(tmp_path, capsys):
    (tmp_path / "e.toml").write_text(SMALL.replace("blocks = 2", "blocks = 2\nrepeats = 3"))
    rc, out, err = cli(["run", str(tmp_path / "e.toml"), "--store", str(tmp_path / "s.db"),
                        "--dry-run", "--json"], capsys)
    assert rc == 0, err
    plan = json.loads(out)
    assert (plan["blocks"], plan["repeats"], plan["trials"]) == (2, 3, 12)
    rc, out, _ = cli(["run", str(tmp_path / "e.toml"), "--store", str(tmp_path / "s.db"),
                      "--dry-run", "--repeats", "4"], capsys)
    assert rc == 0 and "2 block(s) x 4 repeats" in " ".join(out.split())
    (tmp_path / "bad.toml").write_text(SMALL.replace("blocks = 2", "blocks = 2\nrepeats = 0"))
    rc, _, err = cli(["run", str(tmp_path / "bad.toml"), "--dry-run"], capsys)
    assert rc == 2 and "repeats must be an integer >= 1" in err


@pytest.mark.host
@pytest.mark.slow
def test_real_run_with_repeats_is_one_run_and_its_report_combines_them(tmp_path, monkeypatch):
    monkeypatch.setenv("HUGELAB_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "e.toml").write_text(SMALL)
    before = host_state()
    r = subprocess.run([*HUGELAB, "run", "e.toml", "--store", "s.db", "--blocks", "3",
                        "--repeats", "3",
                        "--repeat-pause", "0.5", "--json"], capture_output=True, text=True,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["executed"] == 18 and "repeat 3 of 3 after a 0.5 s pause" in r.stderr
    shown = json.loads(subprocess.run([*HUGELAB, "show", "--store", "s.db", "--json"],
                                      capture_output=True, text=True, cwd=tmp_path).stdout)
    assert len(shown) == 1  # the repeats are one run
    rep = json.loads(subprocess.run([*HUGELAB, "report", "--store", "s.db", "--json"],
                                    capture_output=True, text=True, cwd=tmp_path).stdout)
    (one,) = rep["replication"]
    # machinery, not noise: every repeat's blocks are its own, and the three were combined
    assert [e["n"] for e in one["repeats"]] == [3, 3, 3] and one["pooled"]["k"] == 3
    assert one["verdict"] in ("faster", "slower", "equivalent", "inconclusive")
    assert rep["run"]["repeats"] == 3 and rep["blocks"] == 9
    assert host_state() == before
