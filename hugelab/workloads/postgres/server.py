"""One PostgreSQL server's own parts: its argv (started in the foreground as `postgres`, so the
trial scope contains it and the parent-death signal reaches it), its readiness (postmaster.pid
says so), the LocalServer it runs under (hugelab.workloads.serverside: one readiness wait, one
TERM-then-KILL), its failed start told as a busy pool, and `kill_cluster` for leftovers."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from hugelab.errors import PoolBusyError, WorkloadError
from hugelab.units import parse_size
from hugelab.workloads.postgres import sysvshm
from hugelab.workloads.postgres.cluster import AS_POSTGRES, ClusterDir, as_postgres
from hugelab.workloads.serverside import LocalServer, ServerHandle

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


def kill_cluster(cd: ClusterDir, pid: int | None = None) -> None:
    """SIGKILL the postmaster's process group (the postmaster, its backends)."""
    pid = pid or sysvshm.postmaster_pid(cd.data)
    if pid:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def argv(bin_dir: Path, cd: ClusterDir, settings: dict[str, object]) -> list[str]:
    """The server of `cd` with `settings`, in the foreground as the postgres user (pure)."""
    return [*AS_POSTGRES, str(bin_dir / "postgres"), "-D", str(cd.data),
            *server_options(cd, settings)]


def ready(port: int, pid: int) -> bool:
    """Whether the postmaster `pid` says it is ready for clients: its postmaster.pid (in its
    data directory, its working directory once it has one) names it, `ready` on line 8."""
    try:
        lines = Path(f"/proc/{pid}/cwd/postmaster.pid").read_text().splitlines()
    except OSError:
        return False
    return len(lines) >= 8 and lines[0].strip() == str(pid) and lines[7].strip() == "ready"


def local() -> LocalServer:
    """Its server as a subprocess here: on its private socket (PORT), ready when its
    postmaster.pid says so, TERM (a smart shutdown: no session is left by then), then KILL."""
    return LocalServer(port=PORT, ready_timeout_s=READY_TIMEOUT_S, ready=ready,
                       stop_grace_s=STOP_TIMEOUT_S)


def start_failed(exc: WorkloadError, huge: bool) -> WorkloadError:
    """A start that failed: PoolBusyError when it asked for huge pages (`huge`) and could not
    map them (its own words in its output), else `exc`."""
    if huge and any(w in exc.message for w in NO_POOL):
        return PoolBusyError(exc.message, hint="the huge page pool was reserved for it but "
                             "another process holds its pages; `hugelab recover` ends "
                             "leftovers of a killed run")
    return exc


def start(bin_dir: Path, cd: ClusterDir, settings: dict[str, object]) -> ServerHandle:
    """The server of `cd` with `settings`, ready for clients (a template's build); its
    handle's stop ends it (its segment is removed with `cd`, sysvshm.drop_for)."""
    return local().start(lambda _port: argv(bin_dir, cd, settings), "postgres")
