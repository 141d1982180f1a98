"""One PostgreSQL server: started in the foreground as `postgres` (so the trial scope contains
it and the parent-death signal reaches it), ready when postmaster.pid says so, stopped by a
fast shutdown (SIGINT), killed if that does not end it, its System V segment removed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from hugelab.errors import PoolBusyError, WorkloadError
from hugelab.proc import spawn, wait_for
from hugelab.units import parse_size
from hugelab.workloads.postgres import sysvshm
from hugelab.workloads.postgres.cluster import AS_POSTGRES, ClusterDir, as_postgres

PORT = 5432  # the socket lives in the cluster's own directory: no port is shared
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
# what hugelab sets itself: an arm's app must not move the server off its private socket
RESERVED = frozenset({"listen_addresses", "unix_socket_directories", "port", "data_directory",
                      "hba_file", "ident_file", "config_file", "external_pid_file"})
NO_POOL = ("could not map anonymous shared memory", "could not allocate",
           "huge pages", "Cannot allocate memory")


def setting_text(value: object) -> str:
    """A TOML value as postgresql.conf wants it: true -> on, 256 -> 256, '2MB' -> 2MB."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def server_options(cd: ClusterDir, settings: dict[str, object]) -> list[str]:
    """`-c key=value` for the private socket, the copy's own files (whatever its own
    postgresql.conf says: a user's data directory may name the original's) and every setting
    (pure)."""
    base: dict[str, object] = {"listen_addresses": "", "unix_socket_directories": str(cd.top),
                               "port": PORT, "data_directory": str(cd.data),
                               "hba_file": str(cd.data / "pg_hba.conf"),
                               "ident_file": str(cd.data / "pg_ident.conf")}
    out: list[str] = []
    for key, value in {**base, **settings}.items():
        out += ["-c", f"{key}={setting_text(value)}"]
    return out


def shared_estimate(settings: dict[str, object]) -> int:
    """PostgreSQL's shared memory from its settings, for a dry run that has no server to ask:
    shared_buffers (8 kB pages when a bare number; default 128MB), plus about 6% and 8 MiB
    for its other segments (15: 128MB gives a shared_memory_size of 143MB)."""
    given = str(settings.get("shared_buffers", "128MB"))
    buffers = int(given) * 8192 if given.isdigit() else parse_size(given)
    return int(buffers * 1.06) + (8 << 20)


def ask(bin_dir: Path, cd: ClusterDir, name: str, settings: dict[str, object]) -> str:
    """`postgres -C name` with the settings, on a stopped cluster: a setting's value, or a
    runtime-computed one (shared_memory_size_in_huge_pages); WorkloadError naming an unknown
    key or a bad value (the server's own words)."""
    cp = as_postgres([bin_dir / "postgres", "-D", cd.data, "-C", name,
                      *server_options(cd, settings)], timeout=120)
    return cp.stdout.strip()


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    cd: ClusterDir
    prewarmed_blocks: int = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self, lines: int = 20) -> str:
        try:
            text = self.cd.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])

    def stop(self) -> str:
        """Fast shutdown; SIGKILL (and the segment removed) if it does not end; its output."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                kill_cluster(self.cd, self.proc.pid)
                self.proc.wait(5)
        sysvshm.drop_for(self.cd.data)  # left behind only by a postmaster that was killed
        return self.output(50)


def kill_cluster(cd: ClusterDir, pid: int | None = None) -> None:
    """SIGKILL the postmaster's process group (the postmaster, its backends)."""
    pid = pid or sysvshm.postmaster_pid(cd.data)
    if pid:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _ready(cd: ClusterDir) -> bool:
    try:
        lines = (cd.data / "postmaster.pid").read_text().splitlines()
    except OSError:
        return False
    return len(lines) >= 8 and lines[7].strip() == "ready"


def start(bin_dir: Path, cd: ClusterDir, settings: dict[str, object], *,
          huge: bool = False) -> Server:
    """The server of `cd` with `settings`, ready for clients; PoolBusyError when it asked for
    huge pages (`huge`) and could not map them, WorkloadError for any other failure."""
    log = open(cd.log, "ab")  # noqa: SIM115 - closed below, the child keeps its own copy
    try:
        proc = spawn([*AS_POSTGRES, bin_dir / "postgres", "-D", cd.data,
                      *server_options(cd, settings)],
                     stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    finally:
        log.close()
    server = Server(proc, cd)
    if not wait_for(lambda: _ready(cd), READY_TIMEOUT_S, unless=lambda: proc.poll() is not None):
        out = server.output()
        why = (f"exited with {proc.returncode}" if proc.poll() is not None
               else f"was not ready within {READY_TIMEOUT_S:.0f} s")
        server.stop()
        msg = f"postgres {why}:\n  " + (out or "(no output)").replace("\n", "\n  ")
        if huge and any(w in out for w in NO_POOL):
            raise PoolBusyError(msg, hint="the huge page pool was reserved for it but "
                                "another process holds its pages; `hugelab recover` ends "
                                "leftovers of a killed run")
        raise WorkloadError(msg)
    return server
