"""kind = "redis" from a user's RDB file: each server starts from a private copy of it
(`--dir DIR --dbfilename dump.rdb`, persistence still off) and the keys it loaded are recorded;
pure parts with plain inputs, then a real redis-server run by `hugelab run` with two arms (THP
on and off for the server), the file the same afterwards and no copy left."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from hugelab import identity, owned
from hugelab.errors import ExperimentError
from hugelab.workloads.redis import RedisBenchmark, persist
from hugelab.workloads.redis import rdb as redis_rdb
from hugelab.workloads.serverside import free_port
from tests.helpers import HUGELAB
from tests.hostguard import host_state

needs_redis = pytest.mark.skipif(
    shutil.which("redis-server") is None or shutil.which("redis-cli") is None,
    reason="redis-server / redis-tools not installed")


def test_an_rdb_file_is_known_by_its_header(tmp_path):
    assert redis_rdb.rdb_version(b"REDIS0011\xfa\x09redis-ver") == 11
    for bad in (b"", b"REDIS", b"SQLite format 3\0", b"REDISxx11"):
        with pytest.raises(ValueError, match="not a Redis RDB file"):
            redis_rdb.rdb_version(bad)
    f = tmp_path / "dump.rdb"
    f.write_bytes(b"*2\r\n$3\r\nSET\r\n")  # an AOF, not an RDB
    with pytest.raises(ExperimentError, match="not a Redis RDB file"):
        RedisBenchmark(rdb=str(f))
    with pytest.raises(ExperimentError, match="No such file"):
        RedisBenchmark(rdb=str(tmp_path / "none.rdb"))


def test_keyspace_is_read_as_redis_writes_it():
    info = "# Keyspace\r\ndb0:keys=300,expires=2,avg_ttl=0\r\ndb3:keys=12,expires=0,avg_ttl=0\r\n"
    assert redis_rdb.keyspace_keys(info) == 312
    assert redis_rdb.keyspace_keys("# Keyspace\r\n") == 0
    # its INFO reply is read by the RESP client (redis/resp.py), tested in
    # test_redis_persistence


def test_the_server_loads_its_copy_and_still_never_saves():
    w = RedisBenchmark()
    argv = w.server_argv(7000, Path("/var/tmp/hugelab-redis-1-x"))
    assert argv[argv.index("--dir") + 1] == "/var/tmp/hugelab-redis-1-x"
    assert argv[argv.index("--dbfilename") + 1] == "dump.rdb"
    assert argv[argv.index("--save") + 1] == "" and "--appendonly" in argv
    assert "--dir" not in w.server_argv(7000)


def test_copies_of_dead_runs_are_removed(tmp_path):
    """Redis's private directories are owned ones (hugelab.owned), like PostgreSQL's and
    MariaDB's: a killed run's is removed, a live run's kept, whatever its pid became."""
    live = persist.private_dir(tmp_path)
    assert live.parent == tmp_path and live.stat().st_mode & 0o777 == 0o700
    assert owned.owner_record(live)["owner_pid"] == os.getpid()
    dead = tmp_path / "redis-dead"
    dead.mkdir()
    (dead / owned.OWNER_FILE).write_text(json.dumps({**identity.record(),
                                                     "owner_pid": 2 ** 22 + 1}))
    reused = tmp_path / "redis-reused"  # a dead run's whose pid is this process's now
    reused.mkdir()
    (reused / owned.OWNER_FILE).write_text(json.dumps({**identity.record(),
                                                       "owner_starttime": 1}))
    for d in (dead, live, reused):
        (d / "dump.rdb").write_bytes(b"REDIS0011")
    assert redis_rdb.rdb_leftovers(tmp_path) == [str(dead), str(reused)]
    assert live.is_dir() and not dead.exists() and not reused.exists()


def copies_of(pid: int) -> list[Path]:
    """The private directories process `pid` made and left."""
    return [d for d in redis_rdb.RDB_WORK.glob("redis-*")
            if owned.owner_record(d).get("owner_pid") == pid]


def make_rdb(d: Path, keys: int) -> Path:
    """A user's RDB file: `keys` keys set in a server of their own, then SAVEd."""
    port = free_port()
    srv = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                            "--dir", str(d), "--save", "", "--appendonly", "no"],
                           stdout=subprocess.DEVNULL)
    try:
        cli = ["redis-cli", "-p", str(port)]
        deadline = time.monotonic() + 10
        while subprocess.run([*cli, "PING"], capture_output=True, text=True).stdout.strip() \
                != "PONG":
            assert time.monotonic() < deadline, "the user's redis-server did not start"
            time.sleep(0.05)
        pairs = [x for i in range(keys) for x in (f"user:{i}", f"name {i}")]
        subprocess.run([*cli, "MSET", *pairs], check=True, capture_output=True)
        subprocess.run([*cli, "SAVE"], check=True, capture_output=True)
    finally:
        srv.terminate()
        srv.wait(10)
    return d / "dump.rdb"


EXPERIMENT = """name = "redis-rdb"
seed = 3
blocks = 1
baseline = "4k"
[workload]
kind = "redis"
rdb = "{rdb}"
requests = 2000
clients = 4
[[arms]]
name = "4k"
backing = "4k"
thp = "always"
process_thp = "never"
[[arms]]
name = "thp"
backing = "thp"
thp = "always"
app = {{ disable-thp = "no" }}
"""


@needs_redis
@pytest.mark.host
@pytest.mark.slow
@pytest.mark.server
def test_a_users_rdb_is_loaded_by_every_trial_and_left_as_it_was(tmp_path):
    rdb = make_rdb(tmp_path, 300)
    digest = hashlib.sha256(rdb.read_bytes()).hexdigest()
    exp = tmp_path / "exp.toml"
    exp.write_text(EXPERIMENT.format(rdb=rdb))
    env = {**os.environ, "HUGELAB_STATE_DIR": str(tmp_path / "state")}
    before = host_state()
    store = str(tmp_path / "s.db")
    p = subprocess.Popen([*HUGELAB, "run", str(exp), "--store", store], env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0 and "Traceback" not in out + err, out + err
    shown = json.loads(subprocess.run([*HUGELAB, "show", "1", "--store", store, "--json"],
                                      capture_output=True, text=True, env=env,
                                      check=True).stdout)
    assert {t["arm"] for t in shown["trials"]} == {"4k", "thp"}
    for t in shown["trials"]:
        assert t["status"] == "ok", t
        assert t["provenance"]["rdb"] == {"file": str(rdb), "keys_loaded": 300}
        assert t["metrics"]["get_rps"] > 0
    assert hashlib.sha256(rdb.read_bytes()).hexdigest() == digest
    assert not copies_of(p.pid), "a copy is left"
    assert host_state() == before


@needs_redis
@pytest.mark.slow
@pytest.mark.server
def test_interleaved_servers_each_load_their_own_copy(tmp_path):
    import random

    from hugelab.trial.native import NativeTarget
    from hugelab.workloads.interleave import serve
    rdb = make_rdb(tmp_path, 120)
    digest = hashlib.sha256(rdb.read_bytes()).hexdigest()
    w = RedisBenchmark(requests=2000, clients=4, rdb=str(rdb), duration_s=2, window_s=1)
    a, b = serve(NativeTarget(), [(w, "4k"), (w, "4k")], random.Random(1))
    assert a.info["rdb"] == b.info["rdb"] == {"file": str(rdb), "keys_loaded": 120}
    assert hashlib.sha256(rdb.read_bytes()).hexdigest() == digest
    assert not copies_of(os.getpid()), "a copy is left"
