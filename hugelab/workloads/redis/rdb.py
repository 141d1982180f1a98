"""A user's RDB file for Redis (`rdb = "/path/dump.rdb"`): checked to be one, copied into a
private directory (0700, with its owner record; the original never opened by the server), the
keys the server loaded from it read back (INFO keyspace, before any load) as the trial's
evidence, and a killed run's copies removed by `hugelab recover`."""

from __future__ import annotations

import contextlib
import re
import shutil
import time
from pathlib import Path

from hugelab import owned
from hugelab.errors import WorkloadError
from hugelab.workloads.base import WorkloadResult
from hugelab.workloads.redis import persist
from hugelab.workloads.redis.resp import Conn, parse_info

RDB_NAME = "dump.rdb"
RDB_WORK = persist.PRIVATE_WORK
LOAD_TIMEOUT_S = 600.0


def rdb_version(head: bytes) -> int:
    """The RDB format version from a file's first bytes (`REDIS0011`) (pure); ValueError."""
    if head[:5] != b"REDIS" or not head[5:9].isdigit():
        raise ValueError("not a Redis RDB file (it does not start with REDIS and a version)")
    return int(head[5:9])


def keyspace_keys(info: str) -> int:
    """The keys of every database in `INFO keyspace` (`db0:keys=12,expires=0,...`) (pure)."""
    return sum(int(m.group(1)) for m in re.finditer(r"^db\d+:keys=(\d+)", info, re.MULTILINE))


def rdb_copy(rdb: str) -> Path:
    """A private directory (persist.private_dir) holding a copy of the RDB file."""
    d = persist.private_dir()
    shutil.copyfile(rdb, d / RDB_NAME)
    return d


def work_dir(rdb: str | None, persistence: str) -> Path | None:
    """The server's private directory: a copy of the user's RDB, and where persistence writes
    its files; None where neither needs one."""
    if rdb:
        return rdb_copy(rdb)
    return persist.private_dir() if persistence != "off" else None


def info_section(port: int, section: str, timeout: float = 5.0) -> str:
    """`INFO section` of the server on 127.0.0.1:port, read to the end of its reply."""
    with contextlib.closing(Conn(port, timeout)) as conn:
        reply = conn.call("INFO", section)
    return reply.decode(errors="replace") if isinstance(reply, bytes) else str(reply)


def loaded_keys(port: int, timeout: float = LOAD_TIMEOUT_S) -> int:
    """The keys a server holds once it has finished loading its RDB file."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError, WorkloadError):  # busy loading: asked again
            # the field itself: `async_loading:0` (Redis 7) holds "loading:0" too, and a
            # substring test read a million-key load's count a fifth of the way through
            if parse_info(info_section(port, "persistence")).get("loading") == "0":
                return keyspace_keys(info_section(port, "keyspace"))
        if time.monotonic() > deadline:
            raise WorkloadError(f"redis-server was still loading its RDB after {timeout:.0f} s")
        time.sleep(0.05)


def rdb_keys(port: int, rdb: str | None, rdb_dir: Path | None) -> int | None:
    """The keys a server loaded from the user's RDB (None without one); WorkloadError when it
    holds none."""
    if rdb_dir is None:
        return None
    keys = loaded_keys(port)
    if keys <= 0:
        raise WorkloadError(f"redis-server loaded no keys from {rdb}",
                            hint="the file holds no keys, or not for this server")
    return keys


def record_rdb(result: WorkloadResult, rdb: str | None, keys: int | None) -> None:
    if keys is not None:  # INFO keyspace before any load: what the file brought
        result.info["rdb"] = {"file": rdb, "keys_loaded": keys}


def rdb_leftovers(work: Path = RDB_WORK) -> list[str]:
    """Private directories (RDB copies, persistence's files, links to key-set snapshots)
    whose run is gone (after a kill), and the key-set snapshots a killed build left half
    made: removed, for `hugelab recover`."""
    gone = []
    for top in owned.dead_owned(work):
        shutil.rmtree(top, ignore_errors=True)
        gone.append(str(top))
    return gone + snapshot_cache().sweep()


def snapshot_cache() -> owned.TemplateCache:
    """Where key-set snapshots are kept (hugelab.workloads.redis.snapshot): the cache
    directory's redis/."""
    return owned.TemplateCache(owned.cache_path("redis"))
