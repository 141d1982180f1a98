"""A request-level trial's Redis servers with `snapshot = true` load a cached snapshot of the
key set instead of being written a key at a time (hugelab.workloads.redis.snapshot): built once per (version,
keyspace, value size) in the cache directory, reused without a rebuild, loaded by each server
from a link in its own private directory, and never written by it. Checked against the
server's own answers (DBSIZE, a GET's value) and the file's bytes. (A million keys' load,
tests/test_interleave_servers.py's Redis pair, is what caught the wait for a loaded RDB
reading its count mid-load.)"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hugelab.workloads.redis import RedisBenchmark
from hugelab.workloads.redis.snapshot import snapshot, snapshot_key
from tests.helpers import HUGELAB, run_past_a_stall, shown_trials, stalled_by_the_hypervisor
from tests.hostguard import workload_processes

pytestmark = [pytest.mark.server, pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="redis-server not installed")]
KEYS, SIZE = 20_000, 100


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cli(port: int, *args: str) -> str:
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True,
                          text=True, check=True).stdout.strip()


def test_snapshot_key_names_what_makes_a_key_set():
    keys = {snapshot_key("7.0.15", 1000, 100), snapshot_key("7.0.16", 1000, 100),
            snapshot_key("7.0.15", 1001, 100), snapshot_key("7.0.15", 1000, 101)}
    assert len(keys) == 4 and snapshot_key("7.0.15", 1000, 100) in keys


def test_built_once_loaded_whole_and_never_written(tmp_path, monkeypatch):
    monkeypatch.setenv("HUGELAB_CACHE_DIR", str(tmp_path / "cache"))
    procs = workload_processes()
    rdb = snapshot(shutil.which("redis-server") or "redis-server", KEYS, SIZE)
    assert rdb.is_file() and rdb.read_bytes()[:5] == b"REDIS"
    first, made = sha(rdb), rdb.stat().st_mtime_ns
    assert snapshot("redis-server", KEYS, SIZE) == rdb and rdb.stat().st_mtime_ns == made
    wl = RedisBenchmark(keyspace=KEYS, data_size=SIZE, window_ops=100, duration_s=1,
                        snapshot=True)
    assert wl.snapshots and wl.request_load()["preload"] is False  # the client writes nothing
    srv = wl.launched("4k")
    try:
        wl.fill(srv)
        assert srv.loaded == KEYS
        assert cli(srv.port, "DBSIZE") == str(KEYS)  # the server's own count
        assert cli(srv.port, "STRLEN", "key:000000012345") == str(SIZE)
        assert (srv.files / "dump.rdb").stat().st_ino == rdb.stat().st_ino or \
            sha(srv.files / "dump.rdb") == first
    finally:
        wl.stop(srv)
    assert not srv.files.exists() and sha(rdb) == first  # its link gone, the snapshot as made
    assert workload_processes() == procs
    # a user's RDB, persistence or no preload: no snapshot
    assert not RedisBenchmark(keyspace=KEYS, persistence="rdb", snapshot=True).snapshots
    assert not RedisBenchmark(keyspace=KEYS, preload=False, snapshot=True).snapshots
    off = RedisBenchmark(keyspace=KEYS)  # the default: the client writes every key
    assert not off.snapshots and off.request_load()["preload"] is True


EXP = """\
name = "redis-snapshot"
seed = 3
blocks = 2
design = "interleaved"
baseline = "a"

[workload]
kind = "redis"
tests = ["get", "set"]
clients = 2
keyspace = 20000
data_size = 100
duration_s = 1
window_ops = 200
snapshot = true

[[arms]]
name = "a"
backing = "4k"

[[arms]]
name = "b"
backing = "4k"
"""


def test_a_request_level_run_says_its_servers_loaded_the_snapshot(tmp_path):
    env = {**os.environ, "HUGELAB_CACHE_DIR": str(tmp_path / "cache"),
           "HUGELAB_STATE_DIR": str(tmp_path / "state")}
    (tmp_path / "e.toml").write_text(EXP)
    r = run_past_a_stall([*HUGELAB, "run", "e.toml", "--store", "s.db"], Path("s.db"), env=env,
                         cwd=tmp_path, timeout=600)  # once more if the machine stalled it
    assert r.returncode == 0, r.stdout + r.stderr
    trials = shown_trials(tmp_path / "s.db", env)
    assert len(trials) == 4 and all(t["status"] == "ok" or stalled_by_the_hypervisor(t)
                                    for t in trials), trials
    for t in trials:  # a stalled trial's servers loaded the snapshot as well
        assert t["provenance"]["preload"] == {"from": "snapshot", "keys_loaded": KEYS}, t
    assert len(list((tmp_path / "cache" / "redis").glob("keys-*/dump.rdb"))) == 1
