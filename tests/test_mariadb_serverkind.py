"""MariaDB over the server kinds' base (hugelab.workloads.serverkind, issue 37): its trial
runs the base's life cycle with its own parts (a datadir copied per trial, sysbench's timed
load, its error log and mappings read while the server runs, its start told in the server's
own words), and the base's new hooks leave Redis, memcached and Varnish as they were. No
program starts: a scripted server side and client stand in (the real runs are
tests/test_workload_mariadb.py's)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hugelab.errors import WorkloadError
from hugelab.experiment import Arm
from hugelab.trial.native import NativeTarget
from hugelab.workloads.base import ExecResult
from hugelab.workloads.mariadb import template
from hugelab.workloads.mariadb.workload import Mariadb
from hugelab.workloads.memcached import MemcachedBenchmark
from hugelab.workloads.redis import RedisBenchmark
from hugelab.workloads.serverkind import ServerKind
from hugelab.workloads.serverside import LocalServer
from hugelab.workloads.varnish import VarnishBenchmark
from tests.test_workload_mariadb import RUN


class Proc:
    pid = os.getpid()  # a process whose /proc this test can read: its memory is "the server's"


class Handle:
    client_port = 43306
    proc = Proc()

    def __init__(self, top: Path) -> None:
        self.top, self.stopped = top, False

    def stop(self) -> str:
        self.stopped = True
        return "mariadbd's stdout (its words go to its error log)"


class Side:
    """A ServerSide that records the argv it was asked to start and 'starts' it."""

    def __init__(self, top: Path, fail: bool = False) -> None:
        self.top, self.fail, self.argv, self.handle = top, fail, [], Handle(top)

    def start(self, argv_for_port, tool):
        self.argv = argv_for_port(43306)
        if self.fail:
            raise WorkloadError(f"{tool} server exited with 1")
        return self.handle


class Client:
    name = "native"

    def __init__(self) -> None:
        self.runs: list[list[str]] = []

    def exec(self, argv, *, timeout=None):
        self.runs.append(list(argv))
        return ExecResult(list(argv), 0, RUN, "", 1.0)


@pytest.fixture
def trial(tmp_path, monkeypatch):
    top = tmp_path / "trial-1"
    top.mkdir()
    (top / "error.log").write_text("Version: '10.11.6-MariaDB-0+deb12u1'  socket: ...\n")
    monkeypatch.setattr(template, "trial_dir", lambda w: top)
    return top


def test_a_native_trial_runs_the_bases_life_cycle_with_its_own_parts(trial, monkeypatch):
    side = Side(trial)
    monkeypatch.setattr(Mariadb, "side", lambda self, target: side)
    w = Mariadb(tables=1, table_size=100, warmup_s=2, duration_s=3).for_arm(Arm("off", "4k"))
    client = Client()
    result = w.run(client, "4k")  # type: ignore[arg-type]
    assert f"--datadir={trial / 'data'}" in side.argv and "--port=43306" in side.argv
    assert "--large-pages" not in side.argv and side.handle.stopped
    assert [r[-1] for r in client.runs] == ["run", "run"]  # the warm-up, then the timed load
    assert "--time=2" in client.runs[0] and "--time=3" in client.runs[1]
    assert result.metrics["tps"] == 1599.20 and result.primary == "tps"
    assert result.unit == "transactions/s"
    # the evidence as before the move: its own report and its memory, no output tail (its
    # error log is its report), no tree (a paired trial's tree is the whole trial's)
    assert set(result.evidence) == {"mariadb", "server"}, result.evidence
    assert result.evidence["mariadb"]["large_pages"] is False
    assert result.evidence["server"]["pid"] == os.getpid()
    assert result.info == {"tool": "sysbench", "script": "oltp_read_only", "backing": "4k",
                           "server_version": "10.11.6-MariaDB-0+deb12u1",
                           "sysbench_version": "1.0.20"}
    assert not trial.exists()  # the trial's datadir, removed after the stop


def test_a_failed_start_leads_with_the_servers_error_log(trial, monkeypatch):
    (trial / "error.log").write_text("[ERROR] InnoDB: Cannot allocate memory for the buffer "
                                     "pool\n[ERROR] Aborting\n")
    monkeypatch.setattr(Mariadb, "side", lambda self, target: Side(trial, fail=True))
    w = Mariadb(tables=1, table_size=100).for_arm(Arm("off", "4k"))
    with pytest.raises(WorkloadError, match="mariadbd did not start: .*Cannot allocate.*"
                                            "Aborting") as err:
        w.run(Client(), "4k")  # type: ignore[arg-type]
    assert "exited with 1" in str(err.value.__cause__)
    assert not trial.exists()


def test_a_failed_start_without_its_words_is_the_sides_error(trial, monkeypatch):
    monkeypatch.setattr(Mariadb, "side", lambda self, target: Side(trial, fail=True))
    w = Mariadb(tables=1, table_size=100).for_arm(Arm("off", "4k"))
    with pytest.raises(WorkloadError, match="mariadbd server exited with 1"):
        w.run(Client(), "4k")  # type: ignore[arg-type]


def test_its_server_waits_longer_on_the_host_and_the_other_kinds_as_before():
    w = Mariadb()
    side = w.side(NativeTarget())
    assert isinstance(side, LocalServer) and side.ready_timeout_s == 120.0 and side.port is None
    assert isinstance(w, ServerKind) and w.request_server.__func__ is ServerKind.request_server
    for kind in (RedisBenchmark(), MemcachedBenchmark(), VarnishBenchmark()):
        local = kind.side(NativeTarget())
        assert isinstance(local, LocalServer) and local.ready_timeout_s == 10.0
        assert kind.unit == "requests/s" and kind.output_evidence
    assert RedisBenchmark(port=7000).side(NativeTarget()).port == 7000  # type: ignore[attr-defined]


def test_its_request_client_gets_its_own_protocol():
    assert Mariadb().reqmix_server("127.0.0.1", 3307) == \
        "mysql:db=sbtest,user=sbtest,host=127.0.0.1,port=3307"
