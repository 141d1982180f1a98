"""A PostgreSQL store that goes away mid-run (tests/pg_server.py restarts a real server):
`hugelab run` rides out a fast and an immediate restart to exit 0 with every trial stored
once; a store down past --store-outage stops the run cleanly with its trials in the spool,
`hugelab store flush` writes them, and the next run resumes to every trial exactly once."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from hugelab.errors import StoreConnectionLost
from hugelab.store import Store, Trial
from hugelab.store.locate import open_store
from hugelab.store.outage import RidingStore, StoreOutage, backoff
from hugelab.store.postgres import PostgresStore
from hugelab.store.spool import SPOOL_NAME, Spool, write_id
from tests.helpers import HUGELAB
from tests.hostguard import host_state
from tests.pg_server import Server, pg_bin, running_server

BLOCKS = 8
ARMS = ("4k", "thp")

EXP = f"""\
name = "outage"
seed = 3
blocks = {BLOCKS}

[workload]
kind = "hugelab-mem"
workload = "chase"
size = "16M"
duration = 0.3

[[arms]]
name = "4k"
backing = "4k"

[[arms]]
name = "thp"
backing = "thp"
thp = "always"
"""


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    """A server of this test's own (restarting the session's would disturb other tests)."""
    if pg_bin() is None:
        pytest.fail("PostgreSQL is not installed: ./bootstrap setup installs it")
    with running_server() as srv:
        monkeypatch.setenv("PGPASSWORD", srv.password)
        yield srv


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """The environment of the runs: a state directory (and so a spool) of this test's own."""
    monkeypatch.setenv("HUGELAB_STATE_DIR", str(tmp_path / "state"))
    before = host_state()
    (tmp_path / "exp.toml").write_text(EXP)
    yield {**os.environ, "COLUMNS": "200"}
    subprocess.run([*HUGELAB, "recover"], check=False, capture_output=True)
    assert host_state() == before


def _count(url: str) -> int:
    """Trials in the store, or -1 while it is away."""
    try:
        with open_store(url) as store:
            return int(store.tuples("SELECT COUNT(*) FROM trials")[0][0])
    except StoreConnectionLost:
        return -1


def _wait_for(url: str, n: int, proc: subprocess.Popen[str], limit_s: float = 120) -> None:
    deadline = time.monotonic() + limit_s
    while _count(url) < n:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"fewer than {n} trials after {limit_s} s"
        time.sleep(0.1)


def _start(exp: Path, url: str, env: dict[str, str], *more: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*HUGELAB, "run", str(exp), "--store", url, "--json", *more],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _stored_once(url: str) -> list[dict]:
    """The run's trials, each (block, arm) once, each written once (one attempt, one write
    id of its own)."""
    with open_store(url) as store:
        run = store.runs()[-1]
        trials = list(store.trials(run["id"]))
        assert run["status"] == "finished"
    keys = [(t["block"], t["arm"]) for t in trials]
    assert sorted(keys) == sorted((b, a) for b in range(BLOCKS) for a in ARMS)
    assert all(t["attempts"] == 1 for t in trials)
    ids = [t["provenance"]["write_id"] for t in trials]
    assert len(set(ids)) == len(ids) == 2 * BLOCKS
    return trials


@pytest.mark.host
@pytest.mark.slow
def test_a_run_rides_out_a_fast_and_an_immediate_restart(server: Server, env: dict[str, str],
                                                          tmp_path: Path) -> None:
    url = server.new_database()
    proc = _start(tmp_path / "exp.toml", url, env)
    _wait_for(url, 2, proc)
    server.restart("fast", down_s=1.0)  # from this (main) thread: see Server.start
    _wait_for(url, 6, proc)
    server.restart("immediate", down_s=1.0)
    out, err = proc.communicate(timeout=300)
    assert "Traceback" not in err, err
    assert proc.returncode == 0, err
    assert json.loads(out)["executed"] == 2 * BLOCKS
    assert "riding it out" in err and "is back after" in err, err
    _stored_once(url)
    assert not (tmp_path / "state" / SPOOL_NAME).exists() or _spooled(env) == 0


def _spooled(env: dict[str, str]) -> int:
    cp = subprocess.run([*HUGELAB, "store", "flush", "--json"], capture_output=True, text=True,
                        env=env)
    assert cp.returncode == 0, cp.stderr
    return int(json.loads(cp.stdout)["left"])


@pytest.mark.host
@pytest.mark.slow
def test_a_store_away_past_the_window_stops_cleanly_and_nothing_is_lost(
        server: Server, env: dict[str, str], tmp_path: Path) -> None:
    url = server.new_database()
    proc = _start(tmp_path / "exp.toml", url, env, "--store-outage", "3s")
    _wait_for(url, 2, proc)
    server.stop("fast")
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        server.start()
    assert "Traceback" not in err, err
    assert proc.returncode == 1, err
    assert "was away for more than 3 s" in err and "hugelab store flush" in err, err
    spool = tmp_path / "state" / SPOOL_NAME
    assert spool.stat().st_mode & 0o777 == 0o600
    stored = _count(url)
    assert 2 <= stored < 2 * BLOCKS

    cp = subprocess.run([*HUGELAB, "store", "flush", "--json"], capture_output=True, text=True,
                        env=env)
    assert cp.returncode == 0, cp.stderr
    flushed = json.loads(cp.stdout)
    written = sum(s["written"] for s in flushed["stores"])
    assert written >= 1 and flushed["left"] == 0, flushed  # a trial measured while it was away
    assert _count(url) == stored + written
    again = subprocess.run([*HUGELAB, "store", "flush", "--json"], capture_output=True,
                           text=True, env=env)
    assert json.loads(again.stdout)["stores"] == []  # nothing twice

    cp = subprocess.run([*HUGELAB, "run", str(tmp_path / "exp.toml"), "--store", url,
                         "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert cp.returncode == 0, cp.stderr
    rerun = json.loads(cp.stdout)
    assert rerun["resumed"] and rerun["executed"] == 2 * BLOCKS - stored - written
    _stored_once(url)


@pytest.mark.host
@pytest.mark.slow
def test_a_run_started_while_the_store_is_down_waits_for_it(
        server: Server, env: dict[str, str], tmp_path: Path) -> None:
    """A fleet's database failing over just as the hosts start: each run waits for it (within
    --store-outage) before any host change, then runs to the end; a wrong password is no
    outage and fails at once."""
    url = server.new_database()
    server.stop("fast")
    try:
        proc = _start(tmp_path / "exp.toml", url, env, "--store-outage", "60s", "--blocks", "2")
        time.sleep(3)
        assert proc.poll() is None, proc.communicate()
    finally:
        server.start()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert "waiting up to 1 min" in err and "nothing changed on this host" in err, err
    assert json.loads(out)["executed"] == 4 and _count(url) == 4
    wrong = subprocess.run([*HUGELAB, "run", str(tmp_path / "exp.toml"), "--store", url,
                            "--store-outage", "60s"], capture_output=True, text=True,
                           env={**env, "PGPASSWORD": "not-the-password"}, timeout=30)
    assert wrong.returncode == 1 and "password authentication failed" in wrong.stderr
    assert "waiting" not in wrong.stderr


@pytest.mark.server
def test_a_lost_connection_is_a_store_error_and_reconnects(server: Server) -> None:
    url = server.new_database()
    with open_store(url) as store:
        assert isinstance(store, PostgresStore)
        server.stop("immediate")
        try:
            with pytest.raises(StoreConnectionLost, match="lost the connection"):
                store.tuples("SELECT 1")
            with pytest.raises(StoreConnectionLost):  # every way in: no psycopg error escapes
                store.migrations()
            with pytest.raises(StoreConnectionLost), store.transaction():
                store.execute("SELECT 1")
            with pytest.raises(StoreConnectionLost, match="still away"):
                store.reconnect()
        finally:
            server.start()
        store.reconnect()
        assert store.tuples("SELECT 1") == [(1,)]


# --- the parts, without a server: the spool, write ids, the riding logic on a clock ---------


def _trial(run_id: int, block: int, arm: str = "4k", wid: str | None = None) -> Trial:
    return Trial(run_id, block, 0, arm, "ok", 1.0 + block,
                 provenance={"write_id": wid or write_id()})


def _sqlite(tmp_path: Path) -> tuple[Store, int]:
    store = Store(tmp_path / "s.db")
    run_id, _ = store.get_or_create_run("k", "n", {}, {})
    return store, run_id


def test_the_same_write_twice_is_one_trial_and_a_retry_replaces_it(tmp_path: Path) -> None:
    store, run = _sqlite(tmp_path)
    t = _trial(run, 0)
    assert store.add_trials([t]) == 1
    assert store.add_trials([t]) == 0  # sent again: its commit's acknowledgement was lost
    assert [tr["attempts"] for tr in store.trials(run)] == [1]
    assert store.add_trials([_trial(run, 0)]) == 1  # a new attempt: replaces, counted
    assert [tr["attempts"] for tr in store.trials(run)] == [2]


def test_the_spool_is_private_ordered_and_writes_each_trial_once(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "state" / SPOOL_NAME)
    assert spool.count() == 0 and spool.stores() == [] and not spool.path.exists()
    store, run = _sqlite(tmp_path)
    first, second = [_trial(run, 0), _trial(run, 0, "thp")], [_trial(run, 1)]
    spool.add("pg://a", first)
    spool.add("pg://a", second)
    spool.add("pg://a", second)  # the same unit twice: kept once
    spool.add("pg://b", [_trial(run, 2)])
    assert spool.path.stat().st_mode & 0o777 == 0o600
    assert spool.count("pg://a") == 3 and spool.count() == 4
    assert spool.stores() == ["pg://a", "pg://b"]
    store.add_trials(first)  # written before a crash that kept them in the spool
    done = spool.flush("pg://a", store)
    assert (done.written, done.present) == (1, 2)
    assert spool.count("pg://a") == 0 and spool.count() == 1
    assert sorted((t["block"], t["arm"]) for t in store.trials(run)) == \
        [(0, "4k"), (0, "thp"), (1, "4k")]


class FlakyStore(Store):
    """A SQLite store whose "server" can go away: what RidingStore sees of PostgreSQL."""

    down = False

    def add_trials(self, trials: list[Trial]) -> int:
        self._check()
        return super().add_trials(trials)

    def tuples(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self._check()
        return super().tuples(sql, params)

    def reconnect(self) -> None:
        self._check()

    def _check(self) -> None:
        if self.down:
            raise StoreConnectionLost("lost the connection to store flaky")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def _riding(tmp_path: Path, window_s: float) -> tuple[RidingStore, FlakyStore, Clock, list[str]]:
    inner, clock, said = FlakyStore(tmp_path / "s.db"), Clock(), []
    inner.get_or_create_run("k", "n", {}, {})
    ride = RidingStore(inner, Spool(tmp_path / SPOOL_NAME), window_s, notify=said.append,
                       clock=clock, sleep=clock.sleep)
    return ride, inner, clock, said


def test_riding_spools_while_away_and_writes_once_back(tmp_path: Path) -> None:
    ride, inner, clock, said = _riding(tmp_path, 60)
    inner.down = True
    for block in range(3):  # measured while away: kept, the run goes on
        ride.add_trials([_trial(1, block)])
        clock.now += 5
    assert ride.spool.count() == 3 and ride.lost_since == 0.0
    assert "riding it out for up to 1 min" in said[0]
    inner.down = False
    ride.add_trials([_trial(1, 3)])  # back: the spool first, in order, then this one
    assert ride.lost_since is None and ride.spool.count() == 0
    assert [t["block"] for t in inner.trials(1)] == [0, 1, 2, 3]
    assert any("is back after 15 s" in s for s in said)


def test_reads_wait_for_the_store_and_past_the_window_the_run_stops(tmp_path: Path) -> None:
    ride, inner, clock, _ = _riding(tmp_path, 30)
    inner.down = True
    ride.add_trials([_trial(1, 0)])
    with pytest.raises(StoreOutage, match="away for more than 30 s") as stop:
        ride.done_keys(1)  # a read waits, with backoff, up to the window
    assert clock.now == pytest.approx(30, abs=0.1)
    assert "1 trial(s) are kept" in stop.value.message
    assert stop.value.hint and "hugelab store flush" in stop.value.hint
    with pytest.raises(StoreOutage):
        ride.add_trials([_trial(1, 1)])  # kept first, then the stop
    assert ride.spool.count() == 2
    inner.down = False
    again = RidingStore(inner, ride.spool, 30)  # the next run writes them first
    assert again.spool.count() == 0 and again.done_keys(1) == {(0, "4k", "native"),
                                                                (1, "4k", "native")}


def test_opening_waits_for_an_unreachable_store_within_the_window() -> None:
    from hugelab.errors import StoreError, StoreUnreachable
    from hugelab.store.outage import open_waiting
    clock, said, tries = Clock(), [], []

    def flaky(ok_after: int):
        def opener() -> str:
            tries.append(clock.now)
            if len(tries) <= ok_after:
                raise StoreUnreachable("cannot connect to store S: refused")
            return "store"
        return opener
    assert open_waiting(flaky(3), 60, said.append, clock=clock, sleep=clock.sleep) == "store"
    assert tries == [0.0, 0.5, 1.5, 3.5] and len(said) == 1 and "up to 1 min" in said[0]
    tries.clear()
    clock = Clock()
    with pytest.raises(StoreUnreachable, match=r"waited 10 s for it") as exc:
        open_waiting(flaky(99), 10, clock=clock, sleep=clock.sleep)
    assert clock.now == pytest.approx(10)
    assert exc.value.hint is None or "PGPASSWORD" in exc.value.hint
    tries.clear()
    clock = Clock()

    def refused() -> str:
        tries.append(1)
        raise StoreError("cannot connect to store S: password authentication failed")
    with pytest.raises(StoreError, match="password"):
        open_waiting(refused, 60, clock=clock, sleep=clock.sleep)
    assert tries == [1] and clock.now == 0  # not an outage: no wait
    assert open_waiting(lambda: "now", 0) == "now"


def test_which_failed_connects_are_outages() -> None:
    from hugelab.store.postgres import _unreachable
    assert _unreachable(OSError('connection to server at "127.0.0.1", port 5 failed: '
                                'Connection refused'))
    assert _unreachable(OSError("FATAL:  the database system is starting up"))
    assert not _unreachable(OSError('FATAL:  password authentication failed for user "u"'))
    assert not _unreachable(OSError('FATAL:  database "x" does not exist'))


def test_backoff_grows_to_a_ceiling() -> None:
    assert [backoff(n) for n in range(7)] == [0.5, 1, 2, 4, 8, 15, 15]
