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
from hugelab.workloads.mariadb import oltp, template
from hugelab.workloads.mariadb.workload import Mariadb
from hugelab.workloads.memcached import MemcachedBenchmark
from hugelab.workloads.redis import RedisBenchmark
from hugelab.workloads.serverkind import ServerKind
from hugelab.workloads.serverside import LocalServer
from hugelab.workloads.varnish import VarnishBenchmark
from tests.test_workload_mariadb import RUN
from tests.wayin import ScriptedWay


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
                           "sysbench_version": "1.0.20", "server_files": "fresh"}
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


class DomainWay(ScriptedWay):
    """A scripted way into a user's domain (hugelab.workloads.guestside.Way): files in a dict,
    every exec recorded, sysbench's output RUN; `kill` ends the daemon (its /proc goes)."""

    PID = 4242

    def __init__(self) -> None:
        port = f"{13306:04X}"
        top, proc = "/var/tmp/hugelab", f"/proc/{self.PID}"
        super().__init__({
            "/proc/net/tcp": f"  sl  local_address\n   0: 0100007F:{port} 00000000:0000 0A\n",
            f"{top}/mariadbd.pid": f"{self.PID}\n",
            f"{top}/error.log": "Version: '10.11.6-MariaDB-0+deb12u1'  socket: ...\n",
            f"{proc}/stat": f"{self.PID} (mariadbd) S",
            f"{proc}/status": "THP_enabled:\t1\n",
            f"{proc}/smaps_rollup": "Rss: 65536 kB\nAnonymous: 1024 kB\nAnonHugePages: 0 kB\n",
            f"{proc}/smaps": "7f0-7f8 rw-s 0 0:0 0 /anon_hugepage (deleted)\nSize: 2048 kB\n"
                             "KernelPageSize: 2048 kB\n"})

    def exec(self, argv, *, timeout=None):
        self.log.append(list(argv))
        if argv[0] == "kill":
            self.files.pop(f"/proc/{self.PID}/stat", None)
        if argv[:2] == ["test", "-e"]:  # no layer here (tests/test_mariadb_layer.py has one)
            return ExecResult(list(argv), self.file_op("test", list(argv)) or 0, "", "", 0.01)
        return ExecResult(list(argv), 0, RUN if argv[0] == "sysbench" else "", "", 0.01)



def test_a_trial_in_a_users_domain_runs_the_bases_life_cycle_with_its_own_parts(monkeypatch):
    """In a user's domain the base places its daemon (DomainServers, through InDomain) and
    runs the trial; MariaDB's own parts: the guest's datadir made before the start, its
    tables built in the guest before the load, its log and mappings read through the way in.
    No template is built on this host, and its tree is its server's in the guest."""
    monkeypatch.setattr(template, "trial_dir", lambda w: pytest.fail("a host template"))
    way = DomainWay()
    w = Mariadb(tables=1, table_size=100, warmup_s=0, duration_s=3)
    result = w.for_arm(Arm("on", "hugetlb-2M")).run(way, "hugetlb-2M")  # type: ignore[arg-type]
    ran = [a[0] for a in way.log]
    install, start = ran.index("mariadb-install-db"), ran.index("systemd-run")
    build, load = ran.index("mariadb"), len(ran) - 1 - ran[::-1].index("sysbench")
    assert install < start < build < load < ran.index("kill")
    daemon = way.log[start]
    assert "--datadir=/var/tmp/hugelab/data" in daemon and "--port=13306" in daemon
    assert "--large-pages" in daemon and "--pid-file=/var/tmp/hugelab/mariadbd.pid" in daemon
    assert [a[-1] for a in way.log if a[0] == "sysbench"] == ["prepare", "run"]
    assert way.log[-1] == ["rm", "-rf", "/var/tmp/hugelab"]  # every guest change undone
    # its percentiles sysbench's own, as on the host (they were interpolated in a domain)
    assert result.metrics == oltp.parse(RUN)
    ev = result.evidence
    assert set(ev) == {"mariadb", "server", "tree"}, ev
    assert ev["mariadb"]["mappings"] == [{"size_kb": 2048, "page_kb": 2048}]
    assert ev["server"]["pid"] == DomainWay.PID
    assert ev["tree"]["where"].startswith("guest vm0")
    assert ev["tree"]["hugetlb_by_page_kb"] == {2048: 2048}
    assert result.info["where"] == "domain" and result.info["client"] == "guest vm0"
    assert result.info["backing"] == "hugetlb-2M"
    assert result.info["server_version"] == "10.11.6-MariaDB-0+deb12u1"
