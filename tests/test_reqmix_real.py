"""hugelab-reqmix against real servers on loopback: its op counts agree with each server's
own counters (Redis INFO commandstats, memcached stats, varnishstat, PostgreSQL's table
statistics), and its HTTP bodies read by length and by chunks from a server here."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from hugelab.workloads import reqmix_build
from hugelab.workloads.reqmix import (
    ReqmixResult,
    ReqmixSettings,
    http_server,
    memcached_server,
    mysql_server,
    parse_output,
    pg_server,
    redis_server,
    reqmix_argv,
)
from tests import reqmix_servers as rs

pytestmark = [pytest.mark.server, pytest.mark.tools, pytest.mark.beside]


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
        # each window's start: after the one before it has ended (the clients in lockstep),
        # the last one's end within the client's own wall time
        assert all(b.t_ns >= a.t_ns + a.ns for a, b in itertools.pairwise(r.windows))
        assert 0 <= r.windows[0].t_ns < 2_000_000
        assert r.windows[-1].t_ns + r.windows[-1].ns <= r.wall_ns
    assert orders[0] == orders[1]
    # two arms' balanced blocks (ABBA, BAAB once each per two blocks) leave 32 orders for 10
    # blocks: seed 4 draws seed 3's; seed 5 does not
    other = _run(binary, ReqmixSettings(servers=servers, windows=40, duration_s=None, seed=5))
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


@pytest.mark.skipif(shutil.which("varnishd") is None, reason="needs varnish")
def test_http_counts_agree_with_varnishstat(binary: Path, tmp_path: Path) -> None:
    ports, dirs = [rs.free_port(), rs.free_port()], [tmp_path / "a", tmp_path / "b"]
    with ExitStack() as stack:
        for p, d in zip(ports, dirs, strict=True):
            d.mkdir()
            stack.enter_context(rs.server(rs.varnish_argv(p, d), p))
        s = ReqmixSettings(servers=tuple(http_server("127.0.0.1", p) for p in ports),
                           clients=2, window_ops=20, warm_ops=2, windows=16, duration_s=None,
                           seed=5, keyspace=300, preload=True)
        r = _run(binary, s)
        _check_order(r)
        want = _ops_per_arm(r, s)
        for arm, d in enumerate(dirs):
            st = rs.varnish_stats(d)
            # the preload asks each path once (a miss, cached); every later GET is a hit
            assert st["MAIN.cache_miss"] == 300 == st["MAIN.n_object"]
            assert st["MAIN.cache_hit"] == want[arm] == r.latency[arm].ops_total
            assert st["MAIN.client_req"] == want[arm] + 300


class _Http(BaseHTTPRequestHandler):
    """Answers every GET with 200 and a body, by Content-Length or, every other one, in
    chunks (with an extension and a trailer); counts the GETs."""

    protocol_version = "HTTP/1.1"
    seen: ClassVar[Counter[str]] = Counter()

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.seen[self.path] += 1
        body = self.path.encode() * 50
        self.send_response(200)
        if sum(self.seen.values()) % 2:
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_header("transfer-encoding", "Chunked")  # header and value in any case
        self.end_headers()
        for part in (body[:7], body[7:]):  # a chunk extension, then a trailer, as RFC 9112
            self.wfile.write(b"%x;ext=1\r\n%s\r\n" % (len(part), part))
        self.wfile.write(b"0\r\nX-Trailer: yes\r\n\r\n")

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return


def test_http_reads_bodies_by_length_and_by_chunks(binary: Path) -> None:
    _Http.seen.clear()
    with ThreadingHTTPServer(("127.0.0.1", 0), _Http) as httpd:
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        try:
            s = ReqmixSettings(servers=(http_server("127.0.0.1", httpd.server_port),),
                               window_ops=10, windows=6, duration_s=None, keyspace=50,
                               preload=True)
            r = _run(binary, s)
        finally:
            httpd.shutdown()
    assert sum(_Http.seen.values()) == r.latency[0].ops_total + 50
    assert set(_Http.seen) == {f"/key:{i:012d}" for i in range(50)}


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


def test_the_client_table_has_every_python_builders_protocol(binary: Path) -> None:
    """The C protocol table (main.c) names, in order, the protocols of the Python --server
    builders; a builder's prefix without its ':' is no protocol."""
    specs = [redis_server("h", 1), memcached_server("h", 2), http_server("h", 3),
             pg_server({"host": "/s"}), mysql_server("db", socket="/s")]
    names = [s.split(":", 1)[0] for s in specs]
    cp = subprocess.run([str(binary), "--server", "ftp:x"], capture_output=True, text=True,
                        check=False)
    assert cp.returncode == 2
    assert f"unknown protocol ({', '.join(names)}): ftp:x" in cp.stderr
    for name in names:
        cp = subprocess.run([str(binary), "--server", f"{name}x:1"], capture_output=True,
                            text=True, check=False)
        assert cp.returncode == 2 and "unknown protocol" in cp.stderr


@pytest.fixture(scope="module")
def pg() -> Iterator[tuple[Path, int]]:
    if not (rs.PG_BIN / "postgres").exists():
        pytest.skip("needs PostgreSQL 15")
    with rs.pg_cluster(scale=1) as (top, port):
        rs.psql(top, port, "postgres", "CREATE DATABASE bench2 TEMPLATE bench")
        yield top, port


def _pg_stat(top: Path, port: int, db: str, column: str) -> int:
    rs.psql(top, port, db, "SELECT pg_stat_force_next_flush()")
    return int(rs.psql(top, port, db, f"SELECT {column} FROM pg_stat_user_tables "
                                      "WHERE relname = 'pgbench_accounts'"))


def _pg_servers(top: Path, port: int) -> tuple[str, ...]:
    return tuple(pg_server({"host": str(top), "port": port, "dbname": db, "user": "postgres"})
                 for db in ("bench", "bench2"))


@pytest.mark.parametrize("builtin, column, per_op", [
    ("select-only", "idx_scan", 1), ("simple-update", "n_tup_upd", 1),
    ("tpcb-like", "n_tup_upd", 1)])
def test_pg_counts_agree_with_table_stats(binary: Path, pg: tuple[Path, int], builtin: str,
                                          column: str, per_op: int) -> None:
    top, port = pg
    before = [_pg_stat(top, port, db, column) for db in ("bench", "bench2")]
    s = ReqmixSettings(servers=_pg_servers(top, port), clients=2, window_ops=10, warm_ops=1,
                       windows=12, duration_s=None, seed=2, pg_builtin=builtin)
    r = _run(binary, s)
    _check_order(r)
    want = _ops_per_arm(r, s)
    for arm, db in enumerate(("bench", "bench2")):
        after = _pg_stat(top, port, db, column)
        assert r.latency[arm].ops_total == want[arm]
        assert after - before[arm] == per_op * want[arm]


def test_pg_custom_script(binary: Path, pg: tuple[Path, int], tmp_path: Path) -> None:
    top, port = pg
    script = tmp_path / "s.sql"
    script.write_text("-- a user's script\n\\set lo random(1, 1000 * :scale)\n"
                      "\\set hi (:lo + 9) % (100000 * :scale) + 1\n"
                      "SELECT abalance, ':lo'::text, :lo::int FROM pgbench_accounts\n"
                      "  WHERE aid = :hi;\n")
    before = _pg_stat(top, port, "bench", "idx_scan")
    s = ReqmixSettings(servers=_pg_servers(top, port)[:1], window_ops=7, windows=6,
                       duration_s=None, pg_file=script)
    r = _run(binary, s)
    assert _pg_stat(top, port, "bench", "idx_scan") - before == r.latency[0].ops_total == 42


@pytest.mark.parametrize("text, match", [
    ("\\set a 1\n\\sleep 10 ms\nSELECT 1;\n", "line 2: unsupported meta-command \\sleep"),
    ("\\set a random(1, :nope)\nSELECT 1;\n", "line 1: undefined variable :nope"),
    ("SELECT :b;\n", "line 1: undefined variable :b"),
    ("\\set a abs(1)\nSELECT 1;\n", "unsupported function abs"),
])
def test_pg_script_errors_name_the_line(binary: Path, tmp_path: Path, text: str,
                                        match: str) -> None:
    script = tmp_path / "bad.sql"
    script.write_text(text)
    cp = subprocess.run([str(binary), "--server", "pg:host=/nonexistent", "--pg-file",
                         str(script)], capture_output=True, text=True, check=False)
    assert cp.returncode == 2 and match in cp.stderr


@pytest.mark.skipif(shutil.which("mariadbd") is None, reason="needs mariadb-server")
def test_mysql_counts_agree_with_status(binary: Path) -> None:
    with rs.mariadb(rows=1000) as sock:
        def executed() -> int:
            return int(rs.mysql(sock, "SHOW GLOBAL STATUS LIKE 'Com_stmt_execute'").split()[1])
        before = executed()
        spec = mysql_server("sbtest", socket=str(sock), user="root")
        s = ReqmixSettings(servers=(spec, spec), clients=2, window_ops=3, warm_ops=1,
                           windows=8, duration_s=None, table_size=1000, range_size=100)
        r = _run(binary, s)
        want = _ops_per_arm(r, s)
        assert r.latency[0].ops_total == want[0] and r.latency[1].ops_total == want[1]
        # one op: 10 point selects and 4 ranges, each a prepared statement executed once
        assert executed() - before == 14 * (want[0] + want[1])


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_duration_runs_whole_blocks_with_lockstep_clients(binary: Path,
                                                          two_redis: list[int]) -> None:
    servers = tuple(redis_server("127.0.0.1", p) for p in two_redis)
    r = _run(binary, ReqmixSettings(servers=servers, clients=3, window_ops=None, window_ms=3,
                                    duration_s=0.5, seed=9))
    _check_order(r)
    assert r.blocks >= 2 and len(r.windows) == 4 * r.blocks
    assert r.wall_ns >= 0.5e9
    # a --window-ms window lasts at least its milliseconds on every client
    assert all(w.ns >= 3_000_000 for w in r.windows)
    assert r.clients == 3 and r.user_ns + r.sys_ns > 0
    # a first block that outlasts the duration (a stolen second, a slow machine): still two
    # blocks, the fewest a trial's estimate takes (a trial once failed with one)
    r = _run(binary, ReqmixSettings(servers=servers, clients=1, window_ops=None, window_ms=30,
                                    duration_s=0.01, seed=9))
    _check_order(r)
    assert r.blocks == 2 and len(r.windows) == 8 and r.wall_ns >= 8 * 30e6


def test_build_is_cached_by_its_stamp(tmp_path: Path) -> None:
    first = reqmix_build.build_reqmix(tmp_path)
    mtime = first.stat().st_mtime_ns
    assert reqmix_build.build_reqmix(tmp_path) == first
    assert first.stat().st_mtime_ns == mtime
    (tmp_path / "hugelab-reqmix.stamp").write_text("stale\n")
    reqmix_build.build_reqmix(tmp_path)
    assert first.stat().st_mtime_ns != mtime
    out = subprocess.run([str(first), "--help"], capture_output=True, text=True, check=True)
    assert "--window-ops" in out.stdout


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_three_arms_mirror_their_order(binary: Path, two_redis: list[int]) -> None:
    servers = tuple(redis_server("127.0.0.1", p) for p in (*two_redis, two_redis[0]))
    r = _run(binary, ReqmixSettings(servers=servers, window_ops=5, windows=60,
                                    duration_s=None, seed=8))
    _check_order(r)
    assert r.blocks == 10 and r.arms == 3
    firsts = Counter(w.arm for w in r.windows if w.pos == 0)
    assert len(firsts) == 3  # every arm leads some block: the order is drawn per block
    assert [x.ops_total for x in r.latency] == [100, 100, 100]
