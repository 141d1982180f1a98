"""One trial's mariadbd: its argv (pure), its start on a free loopback port (a failure led by
its own error log), the server's own report of large pages (its
error log's warnings and `large_pages`), and its mappings read just before it stops."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from hugelab.errors import WorkloadError
from hugelab.workloads.serverside import LOOPBACK, LocalServer, ServerHandle

SERVER = "/usr/sbin/mariadbd"
# hugelab's own settings, which an arm's app cannot change: a private datadir, socket and port
RESERVED = frozenset({"datadir", "socket", "port", "bind-address", "user", "pid-file", "tmpdir",
                      "log-error", "large-pages"})
# every cache but InnoDB's kept small, so the pool an arm needs is the buffer pool's
FIXED = ("--key-buffer-size=8M", "--aria-pagecache-buffer-size=8M",
         "--innodb-buffer-pool-dump-at-shutdown=0", "--innodb-buffer-pool-load-at-startup=0",
         "--innodb-fast-shutdown=2", "--skip-name-resolve", "--performance-schema=0")
LOG_BUFFERS = 2 * (16 << 20)  # innodb_log_buffer_size (16 MiB), double-buffered
SMALL_CACHES = 2 * (8 << 20)  # key buffer and Aria page cache, as FIXED sets them
_FAILED = re.compile(r"Couldn't allocate (\d+) bytes \(Large/HugeTLB memory page size (\d+)\)")


def argv(top: Path, port: int, buffer_pool: str, large_pages: bool,
         settings: tuple[tuple[str, Any], ...] = ()) -> list[str]:
    """mariadbd on 127.0.0.1:port over the datadir in `top` (pure)."""
    out = [SERVER, "--no-defaults", "--user=mysql", f"--datadir={top / 'data'}",
           f"--socket={top / 'sock'}", f"--pid-file={top / 'pid'}",
           f"--log-error={top / 'error.log'}", f"--tmpdir={top}",
           f"--bind-address={LOOPBACK}", f"--port={port}",
           f"--innodb-buffer-pool-size={buffer_pool}", *FIXED]
    out += [f"--{k.replace('_', '-')}={_value(v)}" for k, v in settings]
    return out + (["--large-pages"] if large_pages else [])


def large_pages_bytes(pool: int, page_size: int) -> int:
    """Bytes the server maps with --large-pages in pages of `page_size`, for a buffer pool of
    `pool` bytes: the pool (and its block descriptors, about 3%), two redo log buffers and two
    small caches, each in whole pages (pure)."""
    parts = (pool, math.ceil(pool * 0.03), LOG_BUFFERS, SMALL_CACHES, 4 << 20)
    return sum(math.ceil(p / page_size) * page_size for p in parts)


def _value(v: Any) -> str:
    return ("ON" if v else "OFF") if isinstance(v, bool) else str(v)


def report(error_log: str) -> dict[str, Any]:
    """The server's own word on large pages, from its error log: every allocation it could not
    get in huge pages (bytes, page size), which it then made with 4 KiB pages."""
    failed = [{"bytes": int(m.group(1)), "page_size": int(m.group(2))}
              for m in _FAILED.finditer(error_log)]
    return {"large_page_failures": failed,
            "errors": [ln for ln in error_log.splitlines() if "[ERROR]" in ln][-5:]}


def hugetlb_mappings(smaps: str) -> list[dict[str, int]]:
    """The process's mappings in pages larger than 4 KiB: size and page size in KiB (pure)."""
    out: list[dict[str, int]] = []
    size = 0
    for line in smaps.splitlines():
        parts = line.split()
        if line.startswith("Size:") and len(parts) > 1:
            size = int(parts[1])
        elif line.startswith("KernelPageSize:") and len(parts) > 1 and int(parts[1]) > 4:
            out.append({"size_kb": size, "page_kb": int(parts[1])})
    return out


def mappings(pid: int) -> list[dict[str, int]]:
    try:
        return hugetlb_mappings(Path(f"/proc/{pid}/smaps").read_text())
    except OSError:
        return []


def error_log(top: Path | None) -> str:
    """The error log of the server over the datadir in `top` ("" before it wrote one)."""
    path = Path(top or "/nonexistent") / "error.log"
    return path.read_text(errors="replace") if path.exists() else ""


def pid_of(handle: ServerHandle) -> int:
    return int(getattr(getattr(handle, "proc", None), "pid", 0))


def start_failed(exc: WorkloadError, top: Path | None) -> WorkloadError:
    """A start that failed, led by the server's own error log in `top` (`exc` when it said
    nothing)."""
    said = report(error_log(top))["errors"]
    return WorkloadError("mariadbd did not start: " + "; ".join(said)) if said else exc


def start(top: Path, pool: str, large: bool, settings: tuple[tuple[str, Any], ...]
          ) -> ServerHandle:
    """mariadbd on a free loopback port (a template's build); a failure leads with the
    server's own error log."""
    try:
        return LocalServer(ready_timeout_s=120.0).start(
            lambda port: argv(top, port, pool, large, settings), "mariadbd")
    except WorkloadError as exc:
        told = start_failed(exc, top)
        if told is exc:
            raise
        raise told from exc
