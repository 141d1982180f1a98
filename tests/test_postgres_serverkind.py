"""PostgreSQL over the server kinds' base (hugelab.workloads.serverkind, issue 37): its trial on
this host runs the base's life cycle with its own parts (a private cluster copied per trial,
pg_prewarm as its fill, pgbench's warm-up and timed load, the postmaster's segment and output
read while it runs), its server runs under the base's LocalServer (one readiness wait, here
its postmaster.pid; one TERM-then-KILL), and its trials in hugelab's own guest and a user's
domain are its whole_trial. No program starts: a scripted server side and client stand in
(the real runs are tests/test_workload_postgres.py's and tests/test_postgres_guest.py's)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from hugelab.errors import PoolBusyError, WorkloadError
from hugelab.trial.native import NativeTarget
from hugelab.workloads.base import ExecResult, Place, WorkloadResult
from hugelab.workloads.postgres import cluster, guestio, prewarm, segment, server
from hugelab.workloads.postgres.workload import Postgres
from hugelab.workloads.serverkind import ServerKind
from hugelab.workloads.serverside import LocalServer
from tests.test_workload_postgres import PGBENCH_OUT

SEGMENT = {"KernelPageSize_kB": 2048, "Size_kB": 155648, "Hugetlb_kB": 16384}


class Proc:
    pid = os.getpid()


class Handle:
    client_port = server.PORT
    proc = Proc()

    def __init__(self) -> None:
        self.stopped = False

    def output(self) -> str:
        return "\n".join(f"line {i}" for i in range(30))

    def stop(self) -> str:
        self.stopped = True
        return "its output, with its shutdown"


class Side:
    """A ServerSide that records the argv it was asked to start and 'starts' it."""

    def __init__(self, fail: str = "") -> None:
        self.fail, self.argv, self.handle = fail, [], Handle()

    def start(self, argv_for_port, tool):
        self.argv = argv_for_port(server.PORT)
        if self.fail:
            raise WorkloadError(f"{tool} server exited with 1: ...\n  {self.fail}")
        return self.handle


class Client:
    name = "native"

    def __init__(self) -> None:
        self.runs: list[list[str]] = []

    def exec(self, argv, *, timeout=None):
        self.runs.append(list(argv))
        if "--log-prefix" in argv:
            Path(argv[argv.index("--log-prefix") + 1] + ".1").write_text("0 0 120 0 1 1\n")
        return ExecResult(list(argv), 0, PGBENCH_OUT, "", 1.0)


@pytest.fixture
def trial(tmp_path, monkeypatch):
    top = tmp_path / "trial-1"
    (top / "data").mkdir(parents=True)
    monkeypatch.setattr(Postgres, "own_files", lambda self, target: top)
    monkeypatch.setattr(cluster, "bindir", lambda given=None: Path("/pg/bin"))
    monkeypatch.setattr(cluster, "version", lambda b: "15.14")
    monkeypatch.setattr(prewarm, "fill", lambda *a: 1234)
    monkeypatch.setattr(segment, "read_required", lambda pid: dict(SEGMENT, postmaster_pid=pid))
    return top


def pg(backing: str = "4k", **kw) -> Postgres:
    return Postgres(scale=1, warmup_s=1, duration_s=3, arm_backing=backing, **kw)


def test_a_native_trial_runs_the_bases_life_cycle_with_its_own_parts(trial, monkeypatch):
    side = Side()
    monkeypatch.setattr(Postgres, "side", lambda self, target: side)
    client = Client()
    result = pg().run(client, "4k")  # type: ignore[arg-type]
    assert side.argv[:side.argv.index("--") + 1] == cluster.AS_POSTGRES
    assert side.argv[side.argv.index("--") + 1:][:3] == ["/pg/bin/postgres", "-D",
                                                          str(trial / "data")]
    assert "huge_pages=off" in side.argv and side.handle.stopped
    assert ["-T", "1"] == client.runs[0][client.runs[0].index("-T"):][:2]  # the warm-up
    assert ["-T", "3"] == client.runs[1][client.runs[1].index("-T"):][:2]  # the timed load
    assert result.metrics["tps"] == 31397.621261 and result.primary == "tps"
    assert result.unit == "transactions/s"
    # the evidence and info as before the move: the segment alone (no THP picture of the
    # server, no output tail among the evidence), the output tail read while it ran
    assert result.evidence == dict(SEGMENT, postmaster_pid=os.getpid())
    assert list(result.info) == ["tool", "version", "backing", "settings", "builtin",
                                 "server_output_tail", "warnings", "prewarmed_blocks"]
    assert result.info["tool"] == "pgbench" and result.info["prewarmed_blocks"] == 1234
    assert result.info["server_output_tail"].splitlines()[0] == "line 10"
    assert not trial.exists()  # the trial's cluster, removed after the stop


def test_its_settings_follow_the_backing_the_trial_is_given(trial, monkeypatch):
    side = Side()
    monkeypatch.setattr(Postgres, "side", lambda self, target: side)
    w = Postgres(scale=1, warmup_s=0, duration_s=1)  # not bound to an arm
    w.run(Client(), "hugetlb-2M")  # type: ignore[arg-type]
    assert "huge_pages=on" in side.argv and "huge_page_size=2MB" in side.argv


def test_a_start_without_its_huge_pages_is_a_busy_pool(trial, monkeypatch):
    monkeypatch.setattr(Postgres, "side", lambda self, target: Side(
        "FATAL:  could not map anonymous shared memory: Cannot allocate memory"))
    with pytest.raises(PoolBusyError, match="could not map"):
        pg("hugetlb-2M").run(Client(), "hugetlb-2M")  # type: ignore[arg-type]
    assert not trial.exists()
    monkeypatch.setattr(Postgres, "side", lambda self, target: Side("FATAL: bad setting"))
    with pytest.raises(WorkloadError, match="bad setting") as err:
        pg().run(Client(), "4k")  # type: ignore[arg-type]
    assert not isinstance(err.value, PoolBusyError)


def test_its_server_runs_under_the_bases_local_server_and_life_cycle():
    w = Postgres()
    local = w.side(NativeTarget())
    assert isinstance(local, LocalServer) and local.port == server.PORT
    assert local.ready is server.ready and local.ready_timeout_s == server.READY_TIMEOUT_S
    assert local.stop_grace_s == server.STOP_TIMEOUT_S
    assert isinstance(w, ServerKind)
    for name in ("start", "stop", "server_pid", "request_result", "fill"):
        assert getattr(Postgres, name) is getattr(ServerKind, name), name
    assert not hasattr(server, "Server")  # its own start/stop/readiness code is gone


def test_ready_is_the_postmasters_own_word(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a postmaster's working directory is its data directory
    pid = os.getpid()
    lines = [str(pid), str(tmp_path), "1700000000", "5432", str(tmp_path), "", "0 0"]
    (tmp_path / "postmaster.pid").write_text("\n".join([*lines, "starting"]) + "\n")
    assert not server.ready(server.PORT, pid)
    (tmp_path / "postmaster.pid").write_text("\n".join([*lines, "ready   "]) + "\n")
    assert server.ready(server.PORT, pid)
    assert not server.ready(server.PORT, pid + 1_000_000)  # no such process
    (tmp_path / "postmaster.pid").write_text("\n".join(["1", *lines[1:], "ready"]) + "\n")
    assert not server.ready(server.PORT, pid)  # another postmaster's file


def test_a_trial_in_its_own_guest_is_its_whole_trial(monkeypatch):
    ran = []
    monkeypatch.setattr(Postgres, "template", lambda self: Path("/tpl"))
    monkeypatch.setattr(guestio, "run_in_own_guest", lambda w, target, backing: ran.append(
        (target.name, backing)) or WorkloadResult(metrics={"tps": 1.0}, primary="tps", unit="transactions/s", better="higher"))
    guest = SimpleNamespace(name="vm0", place=Place.GUEST)
    result = Postgres().whole_trial(guest, "4k")  # type: ignore[arg-type]
    assert ran == [("vm0", "4k")] and result is not None and result.metrics == {"tps": 1.0}
    assert Postgres().whole_trial(NativeTarget(), "4k") is None  # this host: the base's
