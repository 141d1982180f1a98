"""redis-server + redis-benchmark over 127.0.0.1: argv, CSV parser (live and saved 7.0.15)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hugelab.errors import ExperimentError, ToolMissingError, WorkloadError
from hugelab.trial.native import NativeTarget
from hugelab.workloads.base import ExecResult
from hugelab.workloads.redis import RedisBenchmark
from hugelab.workloads.redis.bench import parse_csv
from hugelab.workloads.serverside import LocalServer, listening

pytestmark = pytest.mark.beside  # lock-free tests here run beside the machine lane (docs/testing.md)

DATA = Path(__file__).parent / "data"
needs_redis = pytest.mark.skipif(
    shutil.which("redis-server") is None or shutil.which("redis-benchmark") is None,
    reason="redis not installed (apt-get install redis-server redis-tools)")


def test_argv():
    w = RedisBenchmark(requests=2000, clients=10, keyspace=1000)
    server = w.server_argv(7000)
    assert server[:5] == ["redis-server", "--port", "7000", "--bind", "127.0.0.1"]
    assert server[server.index("--save") + 1] == ""  # an empty argv element, no shell quoting
    assert server[server.index("--disable-thp") + 1] == "no"
    assert w.benchmark_argv(7000) == [
        "redis-benchmark", "-h", "127.0.0.1", "-p", "7000", "-q", "-n", "2000", "-c", "10",
        "-d", "100", "-P", "1", "-t", "set,get", "--csv", "-r", "1000"]


def test_primary_follows_tests():
    assert RedisBenchmark().primary == "get_rps"
    assert RedisBenchmark(tests=("set",)).primary == "set_rps"
    with pytest.raises(ExperimentError, match="unknown test"):
        RedisBenchmark(tests=("gett",))


def test_parse_saved_csv():
    per = parse_csv((DATA / "redis-benchmark-7.0.15-set-get.csv").read_text())
    assert set(per) == {"set", "get"}
    assert set(per["get"]) == {"rps", "avg_ms", "min_ms", "p50_ms", "p95_ms", "p99_ms", "max_ms"}
    assert per["get"]["min_ms"] <= per["get"]["p50_ms"] <= per["get"]["p99_ms"] <= per["get"]["max_ms"]


def test_parse_headerless_old_csv_and_odd_names():
    per = parse_csv('"PING_INLINE","51020.41"\n"LRANGE_100 (first 100 elements)","20000.00"\n')
    assert per["ping_inline"]["rps"] == 51020.41
    assert per["lrange_100_first_100_elements"]["rps"] == 20000.0


def test_parse_result_and_errors():
    text = (DATA / "redis-benchmark-7.0.15-set-get.csv").read_text()
    res = RedisBenchmark().parse(ExecResult(["redis-benchmark"], 0, text, "", 0.1),
                                 "Redis version=7.0.15, bits=64")
    assert res.primary == "get_rps" and res.unit == "requests/s" and res.better == "higher"
    assert res.metrics["set_p99_ms"] > 0 and res.info["version"] == "7.0.15"
    with pytest.raises(WorkloadError, match="no CSV"):
        parse_csv("")
    with pytest.raises(WorkloadError, match="exited with 1"):
        RedisBenchmark().parse(ExecResult(["redis-benchmark"], 1, "", 'Invalid option "-z"', 0.1))


@pytest.mark.server
@needs_redis
def test_end_to_end_and_live_csv():
    w = RedisBenchmark(requests=2000, clients=10)
    res = w.run(NativeTarget(), "thp")
    assert res.value > 0 and res.metrics["set_rps"] > 0 and res.metrics["get_p99_ms"] > 0
    assert res.info["version"] and res.info["benchmark_version"]
    assert "--disable-thp no" in res.info["backing_note"]
    # the live CSV straight from the tool parses too
    handle = LocalServer().start(w.server_argv, "redis-server")
    try:
        live = NativeTarget().exec(w.benchmark_argv(handle.client_port), timeout=60)
    finally:
        handle.stop()
    assert parse_csv(live.stdout)["get"]["rps"] > 0
    assert not listening(handle.client_port)


class InjectArg:
    """NativeTarget that adds an invalid option to redis-benchmark's command line."""

    name = "native"

    def exec(self, argv, *, timeout=None):
        if argv[0].endswith("redis-benchmark") and "--version" not in argv:
            argv = [*argv, "--no-such-option"]
        return NativeTarget().exec(argv, timeout=timeout)


@pytest.mark.server
@needs_redis
def test_benchmark_failure_keeps_stderr_and_stops_server():
    started: list[int] = []

    class Side:
        def start(self, argv_for_port, tool):
            h = LocalServer().start(argv_for_port, tool)
            started.append(h.client_port)
            return h

    with pytest.raises(WorkloadError) as ei:
        RedisBenchmark(requests=100, server=Side()).run(InjectArg(), "4k")
    assert "Invalid option" in ei.value.message
    assert "--no-such-option" in ei.value.stdout + ei.value.stderr  # type: ignore[attr-defined]
    assert not listening(started[0]), "server stopped in finally"


def test_missing_binaries_name_the_packages():
    with pytest.raises(ToolMissingError) as ei:
        RedisBenchmark(server_binary="/nonexistent/redis-server").run(NativeTarget(), "4k")
    assert ei.value.package == "redis-server"


@pytest.mark.server
@needs_redis
def test_missing_benchmark_names_redis_tools():
    with pytest.raises(ToolMissingError) as ei:
        RedisBenchmark(benchmark_binary="/nonexistent/redis-benchmark").run(NativeTarget(), "4k")
    assert ei.value.package == "redis-tools"


def test_each_window_is_sized_by_the_servers_last_run(monkeypatch):
    """A warm-up under a load spike measured a third of the rate: the first window is short,
    the next one is sized by the first's rate (a CI run's windows were 2.5x short in all)."""
    from types import SimpleNamespace

    from hugelab.workloads.base import WorkloadResult
    w = RedisBenchmark(requests=1000, clients=2)
    asked: list[int] = []

    def bench(target, srv, requests):
        asked.append(requests)
        wall = requests / 30000  # the machine's true rate: 30,000 a second
        return WorkloadResult(metrics={"get_rps": 30000.0, "wall_s": wall}, primary="get_rps",
                              unit="requests/s", better="higher")

    monkeypatch.setattr(RedisBenchmark, "_bench", lambda self, *a: bench(*a))
    srv = SimpleNamespace(rate=10000.0)  # the warm-up's, under the spike
    first, _ = w.window(NativeTarget(), srv, 1.0)
    second, _ = w.window(NativeTarget(), srv, 1.0)
    assert asked == [10000, 30000] and first["wall_s"] < 0.5 and second["wall_s"] == 1.0
