"""hugelab-reqmix against real servers on loopback: its op counts agree with each server's
own counters (Redis INFO commandstats, memcached stats, PostgreSQL's table statistics)."""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from hugelab.workloads import reqmix_build
from hugelab.workloads.reqmix import (
    ReqmixResult,
    ReqmixSettings,
    memcached_server,
    parse_output,
    pg_server,
    redis_server,
    reqmix_argv,
)
from tests import reqmix_servers as rs


@pytest.fixture(scope="module")
def binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("reqmix")
    cflags, libs = reqmix_build.flags()
    stderr = reqmix_build.compile_reqmix(reqmix_build.SOURCE_DIR, out / "hugelab-reqmix",
                                         cflags, libs)
    assert stderr == "", f"the client does not compile warning-free:\n{stderr}"
    return out / "hugelab-reqmix"


def _run(binary: Path, settings: ReqmixSettings) -> ReqmixResult:
    cp = subprocess.run(reqmix_argv(binary, settings), capture_output=True, text=True,
                        timeout=120, check=False)
    assert cp.returncode == 0, cp.stderr
    return parse_output(cp.stdout)


def _check_order(result: ReqmixResult) -> None:
    """Every block is a permutation of the arms followed by its mirror."""
    n = result.arms
    blocks: dict[int, list[int]] = {}
    for w in result.windows:
        blocks.setdefault(w.block, []).append(w.arm)
    assert len(blocks) == result.blocks
    for arms in blocks.values():
        assert sorted(arms[:n]) == list(range(n)) and arms[n:] == arms[:n][::-1]


def _ops_per_arm(result: ReqmixResult, s: ReqmixSettings) -> Counter[int]:
    per_window = s.clients * ((s.window_ops or 0) + s.warm_ops)
    return Counter({a: per_window * c for a, c in Counter(w.arm for w in result.windows).items()})


@pytest.fixture()
def two_redis() -> Iterator[list[int]]:
    ports = [rs.free_port(), rs.free_port()]
    with ExitStack() as stack:
        for p in ports:
            stack.enter_context(rs.server(rs.redis_argv(p), p))
        yield ports


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_redis_counts_agree_with_commandstats(binary: Path, two_redis: list[int]) -> None:
    s = ReqmixSettings(servers=tuple(redis_server("127.0.0.1", p) for p in two_redis),
                       clients=2, window_ops=30, warm_ops=3, windows=24, duration_s=None,
                       seed=11, keyspace=500, value_size=64, set_ratio=0.2, preload=True)
    r = _run(binary, s)
    _check_order(r)
    want = _ops_per_arm(r, s)
    assert sum(want.values()) == 24 * 2 * 33
    for arm, port in enumerate(two_redis):
        stats = rs.redis_info(port, "commandstats")
        calls = sum(int(stats[f"cmdstat_{c}"].split(",")[0].split("=")[1])
                    for c in ("get", "set") if f"cmdstat_{c}" in stats)
        lat = r.latency[arm]
        assert lat.preloaded == 500
        assert lat.ops_total == want[arm]
        assert calls == lat.ops_total + lat.preloaded
        assert lat.timed_ops == want[arm] * 30 // 33
        assert 0 < lat.p50_ns <= lat.p99_ns <= lat.max_ns
        keys = rs.redis_info(port, "keyspace")["db0"]
        assert keys.startswith("keys=500,")
    assert all(w.ops == 60 and w.ns > 0 and w.cpu_ns > 0 for w in r.windows)


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_same_seed_same_order_and_window_ms(binary: Path, two_redis: list[int]) -> None:
    servers = tuple(redis_server("127.0.0.1", p) for p in two_redis)
    orders = []
    for _ in range(2):
        r = _run(binary, ReqmixSettings(servers=servers, window_ops=None, window_ms=2,
                                        windows=40, duration_s=None, seed=3))
        orders.append([w.arm for w in r.windows])
        assert all(w.ns >= 2_000_000 and w.ops > 0 for w in r.windows)
    assert orders[0] == orders[1]
    other = _run(binary, ReqmixSettings(servers=servers, windows=40, duration_s=None, seed=4))
    assert [w.arm for w in other.windows] != orders[0]


@pytest.mark.skipif(shutil.which("memcached") is None, reason="needs memcached")
def test_memcached_counts_agree_with_stats(binary: Path) -> None:
    ports = [rs.free_port(), rs.free_port()]
    with ExitStack() as stack:
        for p in ports:
            stack.enter_context(rs.server(rs.memcached_argv(p), p))
        s = ReqmixSettings(servers=tuple(memcached_server("127.0.0.1", p) for p in ports),
                           clients=3, window_ops=20, warm_ops=2, windows=16, duration_s=None,
                           seed=5, keyspace=300, value_size=1000, set_ratio=0.1,
                           preload=True)
        r = _run(binary, s)
        _check_order(r)
        want = _ops_per_arm(r, s)
        for arm, port in enumerate(ports):
            st = rs.memcached_stats(port)
            assert int(st["cmd_get"]) + int(st["cmd_set"]) == want[arm] + 300
            assert int(st["get_hits"]) == int(st["cmd_get"])  # every key was preloaded
            assert r.latency[arm].ops_total == want[arm]


def test_unreachable_server_is_named(binary: Path) -> None:
    port = rs.free_port()
    cp = subprocess.run([str(binary), "--server", f"redis:127.0.0.1:{port}", "--windows", "2"],
                        capture_output=True, text=True, check=False)
    assert cp.returncode == 3
    assert f"redis server 0 (127.0.0.1:{port})" in cp.stderr and "connect" in cp.stderr


@pytest.mark.parametrize("argv, match", [
    (["--windows", "2"], "no --server"),
    (["--server", "ftp:x"], "unknown protocol"),
    (["--server", "redis:h:1", "--window-ops", "5", "--window-ms", "5"], "not both"),
    (["--server", "redis:h:1", "--clients", "x"], "bad number: --clients"),
])
def test_usage_errors(binary: Path, argv: list[str], match: str) -> None:
    cp = subprocess.run([str(binary), *argv], capture_output=True, text=True, check=False)
    assert cp.returncode == 2 and match in cp.stderr
