"""hugelab-reqmix's pure side: argv builder, report parser, build flags, window analysis."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.signal import lfilter

from hugelab.errors import HugelabError
from hugelab.stats._util import StatsInputError
from hugelab.stats.windows import arm_rates, batch_means, block_log_ratios, window_effect
from hugelab.workloads import reqmix_build
from hugelab.workloads.reqmix import (
    ReqmixOutputError,
    ReqmixSettings,
    effects,
    memcached_server,
    mysql_server,
    parse_output,
    pg_server,
    redis_server,
    reqmix_argv,
)
from hugelab.workloads.requests import arm_metrics


def test_argv_names_every_setting() -> None:
    s = ReqmixSettings(servers=(redis_server("127.0.0.1", 6380),
                                memcached_server("::1", 11211)),
                       clients=4, window_ops=50, warm_ops=5, windows=100, duration_s=None,
                       seed=7, set_ratio=0.25, preload=True)
    argv = reqmix_argv("/bin/reqmix", s)
    assert argv[:5] == ["/bin/reqmix", "--server", "redis:127.0.0.1:6380",
                        "--server", "memcached:::1:11211"]
    pairs = dict(zip(argv[5::2], argv[6::2], strict=False))
    assert pairs["--clients"] == "4" and pairs["--window-ops"] == "50"
    assert pairs["--windows"] == "100" and pairs["--set-ratio"] == "0.25"
    assert "--duration-s" not in argv and "--window-ms" not in argv
    assert argv[-1] == "--preload"


@pytest.mark.parametrize("kwargs", [
    {"window_ms": 5},                       # both window_ops (default) and window_ms
    {"windows": 10},                        # both duration_s (default) and windows
    {"pg_builtin": "tpcc"},
    {"clients": 0},
    {"set_ratio": 1.5},
])
def test_settings_refuse(kwargs: dict[str, object]) -> None:
    with pytest.raises(HugelabError):
        ReqmixSettings(servers=("redis:h:1",), **kwargs)  # type: ignore[arg-type]


def test_pg_server_quotes_and_refuses_a_password() -> None:
    spec = pg_server({"host": "/var/tmp/a b", "port": 5433, "dbname": "it's"})
    assert spec == "pg:host='/var/tmp/a b' port='5433' dbname='it\\'s'"
    with pytest.raises(HugelabError, match="PGPASSWORD"):
        pg_server({"host": "h", "password": "x"})


def test_mysql_server() -> None:
    assert mysql_server("sbtest", socket="/run/m.sock") == "mysql:socket=/run/m.sock,db=sbtest"
    with pytest.raises(HugelabError):
        mysql_server("a,b")


def _report(windows: list[dict[str, int]], arms: int = 2) -> str:
    lat = [{"arm": a, "protocol": "redis", "ops_total": 100, "preloaded": 0, "timed_ops": 80,
            "mean_ns": 1000, "p50_ns": 900, "p90_ns": 1500, "p99_ns": 3000,
            "p999_ns": 5000, "max_ns": 9000} for a in range(arms)]
    return json.dumps({"reqmix": 1, "arms": arms, "clients": 1, "window_ops": 20,
                       "window_ms": 0, "warm_ops": 0, "seed": 1,
                       "servers": ["redis"] * arms, "blocks": 2, "wall_ns": 10**6,
                       "rusage": {"user_ns": 5, "sys_ns": 6}, "latency": lat,
                       "windows": windows})


def _abba(ns: list[tuple[int, int]]) -> list[dict[str, int]]:
    """Windows of 20 ops, ABBA per block; ns gives (A's, B's) per block."""
    out = []
    for b, (a_ns, b_ns) in enumerate(ns):
        for pos, arm in enumerate((0, 1, 1, 0)):
            out.append({"arm": arm, "block": b, "pos": pos, "ops": 20,
                        "ns": a_ns if arm == 0 else b_ns, "cpu_ns": 100})
    return out


def test_parse_and_summarize() -> None:
    r = parse_output(_report(_abba([(1000, 900), (2000, 1800), (1000, 910)])))
    assert r.arms == 2 and r.user_ns == 5 and r.latency[1].p99_ns == 3000
    assert len(r.windows) == 12 and r.windows[1].arm == 1
    assert r.client_cpu_share(1) == pytest.approx(600 / 7220)
    s = {arm: arm_metrics(r, arm) for arm in (0, 1)}  # a trial's metrics, as trials take them
    # B takes 10%, 10% and 9% less time: its rate is 1/0.9, 1/0.9, 1/0.91 of A's
    want = np.mean(np.log([1 / 0.9, 1 / 0.9, 1 / 0.91]))
    assert s[1]["window_effect_pct"] == pytest.approx(100 * np.expm1(want))
    assert "window_effect_pct" not in s[0]
    assert s[0]["p99_ms"] == pytest.approx(0.003)
    assert s[0]["ops_per_s_mean"] == pytest.approx(
        20 / np.exp(np.mean(np.log([1e3, 2e3, 1e3]))) * 1e9)


@pytest.mark.parametrize("text, match", [
    ("not json", "no JSON"),
    ('{"reqmix": 2}', "version 1"),
    ('{"reqmix": 1, "arms": 2}', "malformed|lacks"),
])
def test_parse_refuses(text: str, match: str) -> None:
    with pytest.raises(ReqmixOutputError, match=match):
        parse_output(text)


def test_block_log_ratios_skip_incomplete_blocks() -> None:
    arms = [0, 1, 1, 0, 0, 1]
    blocks = [0, 0, 0, 0, 1, 1]
    ops = [10] * 6
    ns = [100, 50, 50, 100, 100, 25]
    d = block_log_ratios(arms, blocks, ops, ns, arm=1)
    assert d == pytest.approx([np.log(2), np.log(4)])
    d = block_log_ratios(arms[:5], blocks[:5], ops[:5], ns[:5], arm=1)
    assert d == pytest.approx([np.log(2)])


def test_window_effect_refuses_bad_input() -> None:
    with pytest.raises(StatsInputError, match="2 complete blocks"):
        window_effect([0, 1, 1, 0], [0] * 4, [1] * 4, [1] * 4, arm=1)
    with pytest.raises(StatsInputError, match="ops > 0"):
        window_effect([0, 1], [0, 0], [0, 1], [1, 1], arm=1)


def test_batch_means_and_rates() -> None:
    assert batch_means(np.arange(10.0), 5) == pytest.approx([0.5, 2.5, 4.5, 6.5, 8.5])
    assert batch_means([1.0, 2.0], 20) == pytest.approx([1.0, 2.0])
    rates = arm_rates([0, 1], [10, 20], [1e9, 1e9])
    assert rates == {0: pytest.approx(10.0), 1: pytest.approx(20.0)}


def test_effects_of_three_arms() -> None:
    rng = np.random.default_rng(3)
    win = []
    for b in range(30):
        order = list(rng.permutation(3))
        for pos, arm in enumerate(order + order[::-1]):
            win.append({"arm": int(arm), "block": b, "pos": pos, "ops": 20,
                        "ns": int(1e5 / (1.0, 1.05, 0.9)[arm] * rng.lognormal(0, 0.01)),
                        "cpu_ns": 1})
    eff = effects(parse_output(_report(win, arms=3)))
    assert sorted(eff) == [1, 2]
    assert eff[1].lo < np.log(1.05) < eff[1].hi
    assert eff[2].lo < np.log(0.9) < eff[2].hi


def _sim_trial(rng: np.random.Generator, blocks: int, effect: float) -> tuple[float, float]:
    """One trial of 2 arms in ABBA windows on a machine whose speed drifts: a log speed
    that wanders with an SD of 12% and a correlation time of 500 windows (0.5 s of 1 ms
    windows, as this VM's vCPU does), plus 3% noise per window. Returns the interval."""
    n = 4 * blocks
    phi = np.exp(-1 / 500)
    drift = lfilter([1.0], [1.0, -phi], rng.normal(0, 0.12 * np.sqrt(1 - phi**2), n))
    arms = np.empty(n, dtype=int)
    for b in range(blocks):
        first = int(rng.integers(2))
        arms[4 * b: 4 * b + 4] = (first, 1 - first, 1 - first, first)
    log_rate = drift + rng.normal(0, 0.03, n) + effect * (arms == 1)
    ns = 1e6 / np.exp(log_rate)
    e = window_effect(arms, np.repeat(np.arange(blocks), 4), np.full(n, 20.0), ns, arm=1)
    return e.lo, e.hi


@pytest.mark.parametrize("effect", [0.0, 0.02])
def test_window_interval_covers_the_truth_95_percent(effect: float) -> None:
    """A/A (and a 2% effect) under drift: the 95% interval covers the true log-ratio in
    92-98% of 600 simulated trials (the band is ±2.8 SE of a coverage estimate)."""
    rng = np.random.default_rng(20261126)
    hits = 0
    for _ in range(600):
        lo, hi = _sim_trial(rng, blocks=250, effect=effect)
        hits += lo <= effect <= hi
    assert 0.92 <= hits / 600 <= 0.98


def test_simulated_effect_is_found() -> None:
    rng = np.random.default_rng(5)
    found = sum(_sim_trial(rng, 250, 0.02)[0] > 0 for _ in range(50))
    assert found >= 45


def test_build_flags_follow_the_headers(tmp_path: Path) -> None:
    pg, my = tmp_path / "libpq-fe.h", tmp_path / "mysql.h"
    cflags, libs = reqmix_build.flags(pg, my)
    assert libs == [] and "-DRM_WITH_PG" not in cflags and "-Werror" in cflags
    pg.touch()
    my.touch()
    cflags, libs = reqmix_build.flags(pg, my)
    assert libs == ["-lpq", "-lmariadb"]
    assert "-DRM_WITH_PG" in cflags and "-DRM_WITH_MYSQL" in cflags


def test_stamp_changes_with_sources_and_flags(tmp_path: Path) -> None:
    (tmp_path / "a.c").write_text("int x;\n")
    one = reqmix_build.stamp_text(tmp_path, ["-O2"], [])
    assert reqmix_build.stamp_text(tmp_path, ["-O2"], ["-lpq"]) != one
    (tmp_path / "a.h").write_text("/* */\n")
    assert reqmix_build.stamp_text(tmp_path, ["-O2"], []) != one
