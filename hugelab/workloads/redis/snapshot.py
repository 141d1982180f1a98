"""A request-level trial's key set written once and kept (issue 39 item 3): the RDB file of a
redis-server that preloaded every key of the keyspace, cached by content (the server's
version, the keyspace, the value size and this format) like PostgreSQL's template, so that
each trial's servers load it at their start instead of being written a key at a time.

At a million keys of 1 KiB a block of three servers spent 12.8 of its 17.8 s outside its
requests (docs/benchmarks.md, "Redis at 1.1 GB a server, to its verdict"); the client's
pipelined SETs wrote each server in turn on the one CPU they share. A server loads the file
while it starts (it listens first, answering `-LOADING`), and `loaded` waits until it is done
and checks that every key came.

The key set is the same as the preload's: `key:%012d` for every key, each value `size`
bytes. Each server gets the file through a hard link in its own private directory (a copy
where the cache is on another file system): with no save points and SHUTDOWN NOSAVE the
server never writes it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from pathlib import Path

from hugelab.errors import WorkloadError
from hugelab.workloads.redis import persist
from hugelab.workloads.redis.control import stop
from hugelab.workloads.redis.preload import preload
from hugelab.workloads.redis.rdb import RDB_NAME, loaded_keys, snapshot_cache
from hugelab.workloads.redis.resp import Conn
from hugelab.workloads.serverkind import version
from hugelab.workloads.serverside import LOOPBACK, LocalServer


def applies(asked: bool, preloads: bool, rdb: object, persistence: str) -> bool:
    """Whether request-level servers load the cached snapshot: asked (`snapshot = true`), with
    a preload to stand for, no user's RDB and no persistence (the one rule for the run and for
    the cost model, which has only the table)."""
    return bool(asked) and preloads and not rdb and persistence == "off"

FORMAT = 1  # what a snapshot holds and how it is made; a change makes new ones
SAVE_TIMEOUT_S = 600.0


def snapshot_key(server_version: str, keyspace: int, size: int) -> str:
    """The cache key of a key set (pure): the server's version, its keys, their size."""
    text = f"redis-snapshot {FORMAT} {server_version} {keyspace} {size}"
    return "keys-" + hashlib.sha256(text.encode()).hexdigest()[:20]


def _build(server_binary: str, keyspace: int, size: int, tmp: Path) -> None:
    """A fresh server in `tmp` filled by the preload, then SAVEd to tmp/dump.rdb."""
    tmp.mkdir(mode=0o700)
    argv = [server_binary, "--bind", LOOPBACK, "--dir", str(tmp), "--dbfilename", RDB_NAME,
            "--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "yes"]
    handle = LocalServer().start(lambda port: [*argv, "--port", str(port)], "redis-server")
    try:
        port = handle.client_port
        cli = str(Path(server_binary).with_name("redis-cli"))
        if not Path(cli).is_absolute():
            cli = shutil.which("redis-cli") or "redis-cli"
        preload(None, cli, port, keyspace, size)
        with contextlib.closing(Conn(port, SAVE_TIMEOUT_S)) as conn:
            reply = conn.call("SAVE")
        if reply != b"OK":
            raise WorkloadError(f"redis-server did not save its key set: {reply!r}")
        stop(port)
    finally:
        handle.stop()
    if not (tmp / RDB_NAME).is_file():
        raise WorkloadError(f"redis-server saved no {RDB_NAME} in {tmp}")


def snapshot(server_binary: str, keyspace: int, size: int) -> Path:
    """The cached RDB file of this key set, built first if it is not there yet."""
    found = version([server_binary, "--version"], r"v=(\S+)") or "unknown"
    cache = snapshot_cache()
    key = snapshot_key(found, keyspace, size)
    top = cache.ensure(key, lambda tmp: _build(server_binary, keyspace, size, tmp),
                       ready=lambda p: (p / RDB_NAME).is_file())
    return top / RDB_NAME


def linked(rdb: Path) -> Path:
    """A server's private directory holding `rdb` as dump.rdb (a hard link, else a copy)."""
    d = persist.private_dir()
    try:
        os.link(rdb, d / RDB_NAME)
    except OSError:  # another file system
        shutil.copyfile(rdb, d / RDB_NAME)
    return d


def keys_loaded(port: int, keyspace: int) -> int:
    """The keys a server loaded from its snapshot, once loaded; WorkloadError unless every
    key of the keyspace came."""
    keys = loaded_keys(port)
    if keys != keyspace:
        raise WorkloadError(f"redis-server loaded {keys} keys from its key-set snapshot, not "
                            f"the {keyspace} of the keyspace",
                            hint="remove the snapshot (hugelab's cache directory, redis/) and "
                            "run again")
    return keys
