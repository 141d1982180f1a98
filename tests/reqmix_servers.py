"""Real servers on loopback for hugelab-reqmix's tests and bench: Redis, memcached and a
throw-away PostgreSQL 15 cluster (huge_pages = off, set explicitly), each stopped after."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

PG_BIN = Path("/usr/lib/postgresql/15/bin")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port} after 15 s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def server(argv: Sequence[str], port: int, cpus: set[int] | None = None
           ) -> Iterator[subprocess.Popen[bytes]]:
    """A server process listening on `port`, pinned to `cpus` if given; stopped after."""
    proc = subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "--", *argv],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if cpus is not None:
            os.sched_setaffinity(proc.pid, cpus)
        _wait_port(port, proc)
        yield proc
    finally:
        _stop(proc)


def redis_argv(port: int) -> list[str]:
    return ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no"]


def memcached_argv(port: int) -> list[str]:
    return ["memcached", "-p", str(port), "-l", "127.0.0.1", "-U", "0", "-u", "nobody",
            "-m", "256"]


def varnish_argv(port: int, workdir: Path) -> list[str]:
    """varnishd in the foreground, no backend: every miss a cached 200 of 4 KiB (hugelab's
    VCL), its work directory `workdir`."""
    from hugelab.workloads.varnish import vcl
    (workdir / "t.vcl").write_text(vcl(4))
    return ["varnishd", "-F", "-n", str(workdir), "-a", f"127.0.0.1:{port}", "-f",
            str(workdir / "t.vcl"), "-s", "malloc,64m", "-T", "none", "-j", "none"]


def varnish_stats(workdir: Path) -> dict[str, int]:
    """varnishd's own counters (varnishstat -1), as name -> value."""
    out = subprocess.run(["varnishstat", "-n", str(workdir), "-1"], check=True,
                         capture_output=True, text=True, timeout=30).stdout
    return {p[0]: int(p[1]) for p in map(str.split, out.splitlines())
            if len(p) > 1 and p[1].isdigit()}


def redis_info(port: int, section: str) -> dict[str, str]:
    """`INFO section` of a Redis server, as key -> value."""
    out = subprocess.run(["redis-cli", "-p", str(port), "info", section], check=True,
                         capture_output=True, text=True).stdout
    return dict(line.split(":", 1) for line in out.splitlines() if ":" in line)


def memcached_stats(port: int) -> dict[str, str]:
    """memcached's `stats`, read over its text protocol."""
    with socket.create_connection(("127.0.0.1", port), 5) as s:
        s.sendall(b"stats\r\n")
        buf = b""
        while not buf.endswith(b"END\r\n"):
            buf += s.recv(65536)
    return {p[1]: p[2] for p in (line.split() for line in buf.decode().splitlines())
            if len(p) == 3 and p[0] == "STAT"}


def _as_postgres(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", "postgres", "--", *argv], check=True,
                          capture_output=True, text=True)


@contextmanager
def pg_cluster(scale: int = 1, cpus: set[int] | None = None) -> Iterator[tuple[Path, int]]:
    """A PostgreSQL 15 cluster in tmp (unix socket only, trust auth, huge_pages = off,
    fsync off) with pgbench's tables at `scale` in database `bench`: (socket dir, port).
    With `cpus`, the postmaster is pinned there before any backend forks (they inherit)."""
    top = Path(tempfile.mkdtemp(prefix="reqmix-pg-"))
    shutil.chown(top, "postgres", "postgres")
    port = free_port()
    proc = None
    try:
        _as_postgres([str(PG_BIN / "initdb"), "-D", str(top / "data"), "--auth=trust",
                      "-U", "postgres"])
        with open(top / "data" / "postgresql.conf", "a") as conf:
            conf.write(f"listen_addresses = ''\nport = {port}\nunix_socket_directories = "
                       f"'{top}'\nhuge_pages = off\nfsync = off\nmax_connections = 30\n")
        proc = subprocess.Popen(
            ["setpriv", "--reuid", "postgres", "--regid", "postgres", "--init-groups",
             "--pdeathsig", "KILL", "--", str(PG_BIN / "postgres"), "-D", str(top / "data")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if cpus is not None:
            os.sched_setaffinity(proc.pid, cpus)
        _wait_pg(top, port, proc)
        psql(top, port, "postgres", "CREATE DATABASE bench")
        _as_postgres([str(PG_BIN / "pgbench"), "-i", "-q", "-s", str(scale), "-h", str(top),
                      "-p", str(port), "bench"])
        yield top, port
    finally:
        if proc is not None:
            proc.send_signal(2)  # fast shutdown
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(top, ignore_errors=True)


def _wait_pg(top: Path, port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"postgres exited {proc.returncode}")
        ok = subprocess.run([str(PG_BIN / "pg_isready"), "-q", "-h", str(top), "-p", str(port)])
        if ok.returncode == 0:
            return
        time.sleep(0.2)
    raise RuntimeError("postgres did not start in 30 s")


def psql(top: Path, port: int, db: str, sql: str) -> str:
    """Run one SQL command as postgres; its unaligned, tuples-only output."""
    return _as_postgres([str(PG_BIN / "psql"), "-X", "-At", "-h", str(top), "-p", str(port),
                         "-d", db, "-c", sql]).stdout.strip()


@contextmanager
def mariadb(rows: int = 1000) -> Iterator[Path]:
    """A MariaDB server in tmp (socket only, no networking) with sysbench's table sbtest1 of
    `rows` rows in database sbtest: its socket path."""
    top = Path(tempfile.mkdtemp(prefix="reqmix-my-"))
    shutil.chown(top, "mysql", "mysql")
    sock = top / "sock"
    subprocess.run(["mariadb-install-db", f"--datadir={top / 'data'}", "--user=mysql",
                    "--auth-root-authentication-method=normal", "--skip-test-db"],
                   check=True, capture_output=True)
    proc = subprocess.Popen(
        ["setpriv", "--pdeathsig", "KILL", "--", "mariadbd", "--no-defaults",
         f"--datadir={top / 'data'}", f"--socket={sock}", "--skip-networking", "--user=mysql",
         f"--pid-file={top / 'pid'}", "--innodb-buffer-pool-size=64M"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not sock.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        values = ",".join(f"({i},{i % 97},'c{i:03d}','p')" for i in range(1, rows + 1))
        mysql(sock, "CREATE DATABASE sbtest; CREATE TABLE sbtest.sbtest1 (id INT PRIMARY KEY, "
              "k INT, c CHAR(120), pad CHAR(60), KEY k_1 (k)); "
              f"INSERT INTO sbtest.sbtest1 VALUES {values};")
        yield sock
    finally:
        _stop(proc)
        shutil.rmtree(top, ignore_errors=True)


def mysql(sock: Path, sql: str) -> str:
    """Run SQL as root over the socket; tab-separated output without headers."""
    return subprocess.run(["mariadb", "-uroot", f"--socket={sock}", "-N", "-B", "-e", sql],
                          check=True, capture_output=True, text=True).stdout.strip()
