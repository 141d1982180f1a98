"""A real PostgreSQL server for tests: Debian's postgresql-15 binaries, a cluster made by
initdb in a temporary directory, listening on 127.0.0.1 only (a free port), password auth
(scram-sha-256) and TLS with a throw-away self-signed certificate; stopped and removed after.

PostgreSQL refuses to run as root, so the cluster belongs to the `postgres` user the Debian
package creates."""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

USER = "hugelab"


def pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


# pg_ctl's shutdown modes as the postmaster's signals: smart waits for clients, fast ends
# their sessions (AdminShutdown), immediate quits without a checkpoint (crash recovery next)
SHUTDOWN_SIGNALS = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}


@dataclass
class Server:
    host: str
    port: int
    password: str
    socket_dir: Path
    bindir: Path = field(default=Path(), repr=False)
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> None:
        """Start the cluster (again): the same data, port and password. Call it from a thread
        that outlives the server (the main thread): the server gets SIGKILL when the thread
        that started it ends (the parent-death signal is per thread)."""
        if self.proc is not None and self.proc.poll() is None:
            return
        self.proc = _postmaster(self.bindir, self.socket_dir)
        _wait_ready(self.bindir, self.port, self.proc, self.socket_dir / "log")

    def stop(self, mode: str = "fast") -> None:
        """Stop it as `pg_ctl stop -m MODE` would; every client loses its connection."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(SHUTDOWN_SIGNALS[mode])
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def restart(self, mode: str = "fast", down_s: float = 0.0) -> None:
        """`pg_ctl restart -m MODE`, staying down `down_s` seconds in between."""
        self.stop(mode)
        time.sleep(down_s)
        self.start()

    def url(self, db: str = "postgres", **query: str) -> str:
        """A URL without the password (tests pass it in PGPASSWORD, as users should)."""
        q = "&".join(f"{k}={v}" for k, v in query.items())
        return f"postgresql://{USER}@{self.host}:{self.port}/{db}" + (f"?{q}" if q else "")

    def new_database(self) -> str:
        """A fresh, empty database: its URL."""
        import psycopg
        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url(), password=self.password, autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(argv: list[str]) -> None:
    subprocess.run(["runuser", "-u", "postgres", "--", *argv], check=True,
                   capture_output=True, text=True)


def _wait_ready(bindir: Path, port: int, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"postgres exited {server.returncode}: {log.read_text()[-2000:]}")
        ok = subprocess.run([str(bindir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port)])
        if ok.returncode == 0:
            return
        time.sleep(0.2)
    raise RuntimeError(f"postgres did not start in 30 s: {log.read_text()[-2000:]}")


@contextmanager
def running_server(fsync: bool = False, huge_pages: str = "off",
                   shared_buffers: str | None = None) -> Iterator[Server]:
    """`fsync`: durable commits (off for tests: faster, nothing to keep). `huge_pages`: set
    explicitly, never PostgreSQL's default `try`, which takes its shared memory from whatever
    2 MiB pool the host has at start-up and holds it until the server stops: a store server
    started while a test had a pool up kept those pages, and every later hugetlb trial on the
    host found its pool short (CI failed that way). `shared_buffers`: its size (e.g. "16MB"),
    PostgreSQL's default when None; with huge_pages = on it sets the pages the server holds."""
    bindir = pg_bin()
    if bindir is None:
        raise RuntimeError("PostgreSQL is not installed (Debian package postgresql)")
    top = Path(tempfile.mkdtemp(prefix="hugelab-pg-"))
    shutil.chown(top, "postgres", "postgres")
    os.chmod(top, 0o700)
    data, pwfile = top / "data", top / "pw"
    password = secrets.token_urlsafe(18)
    pwfile.write_text(password)
    shutil.chown(pwfile, "postgres", "postgres")
    port = _free_port()
    try:
        _as_postgres([str(bindir / "initdb"), "-D", str(data), "-U", USER,
                      "--auth=scram-sha-256", f"--pwfile={pwfile}", "-E", "UTF8"])
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=127.0.0.1", "-keyout", str(data / "server.key"),
                        "-out", str(data / "server.crt")], check=True, capture_output=True)
        for f in ("server.key", "server.crt"):
            shutil.chown(data / f, "postgres", "postgres")
            os.chmod(data / f, 0o600)
        with open(data / "postgresql.conf", "a") as conf:
            conf.write(f"listen_addresses = '127.0.0.1'\nport = {port}\n"
                       f"unix_socket_directories = '{top}'\nssl = on\n"
                       f"fsync = {'on' if fsync else 'off'}\nmax_connections = 50\n"
                       f"huge_pages = {huge_pages}\n")
            if shared_buffers is not None:
                conf.write(f"shared_buffers = '{shared_buffers}'\n")
        server = Server("127.0.0.1", port, password, top, bindir)
        try:
            server.start()
            yield server
        finally:
            server.stop("fast")
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _postmaster(bindir: Path, top: Path) -> subprocess.Popen[bytes]:
    """The server of the cluster in `top`/data, in the foreground, as postgres, with the
    parent-death signal: a killed test session takes its server with it (pg_ctl would leave a
    daemon behind). Its output is appended to `top`/log."""
    with open(top / "log", "ab") as log:
        return subprocess.Popen(
            ["setpriv", "--reuid", "postgres", "--regid", "postgres", "--init-groups",
             "--pdeathsig", "KILL", "--", str(bindir / "postgres"), "-D", str(top / "data")],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
