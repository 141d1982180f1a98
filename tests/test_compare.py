"""`hugelab compare`: unpaired comparison of two runs on synthetic stores with a known shift."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hugelab.cli.compare import UNPAIRED_WARNING
from hugelab.store import Store, Trial
from tests.helpers import cli


def make_run(path: Path, name: str, values: dict[str, list[float]], *, baseline: str = "4k",
             better: str = "lower", unit: str = "s", kernel: str = "6.1") -> int:
    """A finished run with one trial per value, block i holding the i-th value of every arm."""
    exp = {"name": name, "arms": [{"name": a, "backing": a} for a in values],
           "baseline": baseline}
    with Store(path) as store:
        run_id, _ = store.get_or_create_run(f"key-{name}", name, exp, {})
        for arm, vals in values.items():
            for i, v in enumerate(vals):
                store.add_trial(Trial(run_id, i, list(values).index(arm), arm, "ok", v, "time",
                                      unit, better, provenance={"kernel": kernel}))
        store.set_run_status(run_id, "finished")
    return run_id


def lognormal(rng: np.random.Generator, n: int, center: float, sd: float) -> list[float]:
    return list(center * np.exp(rng.normal(0.0, sd, n)))


def test_compare_two_stores_finds_the_known_shift(tmp_path, capsys):
    rng = np.random.default_rng(1)
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    make_run(a, "monday", {"4k": lognormal(rng, 30, 100.0, 0.01),
                           "thp": lognormal(rng, 30, 90.0, 0.01)})
    make_run(b, "friday", {"4k": lognormal(rng, 30, 100.0, 0.01),
                           "thp": lognormal(rng, 30, 90.0 * 0.95, 0.01),
                           "only-b": [1.0] * 30}, kernel="6.8")
    rc, out, err = cli(["compare", str(a), str(b), "--json"], capsys)
    assert rc == 0, err
    assert UNPAIRED_WARNING in err
    data = json.loads(out)
    assert data["warning"] == UNPAIRED_WARNING
    arms = {r["arm"]: r for r in data["arms"]}
    assert set(arms) == {"4k", "thp"}
    thp = arms["thp"]
    assert thp["ci_low_pct"] < -5.0 < thp["ci_high_pct"]
    assert thp["effect_pct"] == pytest.approx(-5.0, abs=1.0)
    assert thp["verdict"] == "B faster" and thp["p_value"] < 1e-6
    assert thp["n_a"] == thp["n_b"] == 30 and thp["unit"] == "s"
    assert arms["4k"]["ci_low_pct"] < 0 < arms["4k"]["ci_high_pct"]
    assert any("kernels differ" in n for n in data["notes"])

    rc, out, err = cli(["compare", str(a), str(b), "--arm", "thp"], capsys)
    assert rc == 0, err
    assert "unpaired comparison of two runs made at different times" in " ".join(out.split())
    assert "B faster" in out and "4k" not in out.split("interval")[-1].split("note")[0]


def test_compare_two_runs_of_one_store_and_higher_is_better(tmp_path, capsys):
    rng = np.random.default_rng(2)
    s = tmp_path / "s.db"
    make_run(s, "r1", {"base": lognormal(rng, 12, 50.0, 0.02)}, baseline="base",
             better="higher", unit="MiB/s")
    make_run(s, "r2", {"base": lognormal(rng, 12, 60.0, 0.02)}, baseline="base",
             better="higher", unit="MiB/s")
    rc, out, err = cli(["compare", str(s), str(s), "--run-a", "1", "--run-b", "2", "--json",
                        "--confidence", "99%"], capsys)
    assert rc == 0, err
    r = json.loads(out)["arms"][0]
    assert r["verdict"] == "B faster" and r["confidence"] == pytest.approx(0.99)
    assert r["effect_pct"] == pytest.approx(20.0, abs=4.0)


def test_compare_errors(tmp_path, capsys):
    s, t = tmp_path / "s.db", tmp_path / "t.db"
    make_run(s, "r1", {"x": [1.0, 2.0, 3.0]}, baseline="x")
    make_run(t, "r2", {"y": [1.0, 2.0, 3.0]}, baseline="y")
    rc, _, err = cli(["compare", str(s), str(t)], capsys)
    assert rc == 2 and "no arm in common" in err
    rc, _, err = cli(["compare", str(s), str(s), "--arm", "nope"], capsys)
    assert rc == 2 and "not in both runs" in err
    rc, _, err = cli(["compare", str(s), str(tmp_path / "missing.db")], capsys)
    assert rc == 1 and "no store at" in err
    rc, _, err = cli(["compare", str(s), str(s), "--run-b", "9"], capsys)
    assert rc == 1 and "no run 9" in err
    rc, _, err = cli(["compare", str(s), str(s), "--confidence", "99.9"], capsys)
    assert rc == 2 and "ambiguous" in err
    assert "Traceback" not in err


def test_compare_tiny_samples_and_same_run_say_so(tmp_path, capsys):
    s = tmp_path / "s.db"
    make_run(s, "r1", {"x": [1.0, 2.0, 3.0]}, baseline="x")
    rc, out, err = cli(["compare", str(s), str(s), "--json"], capsys)
    assert rc == 0, err
    data = json.loads(out)
    r = data["arms"][0]
    assert r["ci_low_pct"] is None and r["ci_high_pct"] is None and r["verdict"] == "inconclusive"
    assert any("same run" in n for n in data["notes"])
    assert any("too few trials for a bounded" in n for n in data["notes"])
    rc, out, _ = cli(["compare", str(s), str(s)], capsys)
    assert rc == 0 and "unbounded" in out
