"""`hugelab report` through the CLI: JSON, files, exit codes and messages, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hugelab.cli import main as cli_main
from tests.helpers import make_store


@pytest.fixture
def main():
    return cli_main


@pytest.fixture
def store(tmp_path):
    db = tmp_path / "s.db"
    make_store(db)
    return db


def test_json_report(main, store, capsys):
    assert main(["report", "--store", str(store), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["comparisons"][0]["verdict"] == "faster"
    assert out["store"] == str(store)


def test_options_are_parsed(main, store, capsys, tmp_path):
    md = tmp_path / "r.md"
    rc = main(["report", "--store", str(store), "--json", "--alpha", "1%", "--margin",
               "2%", "--confidence", "99%", "--pair", "thp:4k", "--md", str(md), "1"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["options"] == {"alpha": 0.01, "margin": 0.02, "confidence": 0.99,
                              "holm_family": 1}
    assert out["comparisons"][0]["name"] == "4k vs thp"
    assert out["comparisons"][0]["verdict"] == "slower"
    assert "| 4k vs thp | slower |" in md.read_text()


def test_terminal_report(main, store, capsys):
    assert main(["report", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "thp vs 4k" in out and "faster" in out


@pytest.mark.parametrize("argv, code, message", [
    (["--store", "{missing}"], 1, "no store at"),
    (["99", "--store", "{store}"], 1, "no run 99"),
    (["--store", "{store}", "--pair", "4k:nope"], 2, "'nope', which is not an arm"),
    (["--store", "{store}", "--alpha", "0.7"], 2, "--alpha must lie between"),
])
def test_errors_exit_with_a_message(main, store, tmp_path, capsys, argv, code, message):
    argv = [a.format(missing=tmp_path / "none.db", store=store) for a in argv]
    assert main(["report", *argv]) == code
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_bad_pair_syntax_is_a_usage_error(main, store, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["report", "--store", str(store), "--pair", "thp"])
    assert exc.value.code == 2
    assert "BASELINE:CANDIDATE" in capsys.readouterr().err


@pytest.mark.slow
def test_too_few_blocks_is_inconclusive_in_a_real_process(tmp_path):
    db = tmp_path / "few.db"
    make_store(db, blocks=3)
    for extra in ([], ["--json"]):
        r = subprocess.run([sys.executable, "-m", "hugelab.cli", "report", "--store", str(db), *extra],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert "inconclusive: too few pairs" in r.stdout
        assert "Traceback" not in r.stdout + r.stderr


@pytest.mark.slow
def test_missing_store_in_a_real_process(tmp_path):
    r = subprocess.run([sys.executable, "-m", "hugelab.cli", "report", "--store",
                        str(tmp_path / "none.db"), "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "hugelab: error: no store at" in r.stderr and "Traceback" not in r.stderr
