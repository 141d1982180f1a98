"""PostgreSQL over the server kinds' base (hugelab.workloads.serverkind, issue 37): its trial on
this host runs the base's life cycle with its own parts (a private cluster copied per trial,
pg_prewarm as its fill, pgbench's warm-up and timed load, the postmaster's segment and output
read while it runs), its server runs under the base's LocalServer (one readiness wait, here
its postmaster.pid; one TERM-then-KILL), its trial in a user's domain is the base's too (the
guest's server placed by DomainServers), and its trial in hugelab's own guest is its
whole_trial. No program starts: a scripted server side and client stand in
(the real runs are tests/test_workload_postgres.py's and tests/test_postgres_guest.py's)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from hugelab.errors import PoolBusyError, WorkloadError
from hugelab.trial.native import NativeTarget
from hugelab.workloads import filepool
from hugelab.workloads.base import ExecResult, Place, WorkloadResult
from hugelab.workloads.postgres import cluster, guestio, pgbench, prewarm, segment, server
from hugelab.workloads.postgres.workload import Postgres
from hugelab.workloads.serverkind import ServerKind
from hugelab.workloads.serverside import LocalServer
from tests.test_workload_postgres import PGBENCH_OUT
from tests.wayin import ScriptedWay

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
                                 "server_output_tail", "warnings", "prewarmed_blocks",
                                 "server_files"]
    assert result.info["server_files"] == "fresh"
    assert result.info["tool"] == "pgbench" and result.info["prewarmed_blocks"] == 1234
    assert result.info["server_output_tail"].splitlines()[0] == "line 10"
    assert not trial.exists()  # the trial's cluster, removed after the stop


def copies(monkeypatch, tmp_path) -> list[Path]:
    """Every cluster own_files makes for a trial (a directory of its own each time)."""
    made: list[Path] = []

    def own(self, target):
        made.append(tmp_path / f"copy-{len(made) + 1}")
        (made[-1] / "data").mkdir(parents=True)
        return made[-1]
    monkeypatch.setattr(Postgres, "own_files", own)
    return made


def test_in_a_run_a_select_only_cluster_stopped_cleanly_serves_the_next_trial(
        trial, monkeypatch, tmp_path):
    made = copies(monkeypatch, tmp_path)
    monkeypatch.setattr(Postgres, "side", lambda self, target: Side())
    with filepool.kept():
        first = pg().run(Client(), "4k")  # type: ignore[arg-type]
        second = pg().run(Client(), "hugetlb-2M")  # type: ignore[arg-type]
        assert [first.info["server_files"], second.info["server_files"]] == ["fresh", "kept"]
        assert len(made) == 1 and made[0].exists() and filepool.held() == 1
    assert not made[0].exists() and filepool.held() == 0  # dropped at the run's end


@pytest.mark.parametrize("kw", [{"builtin": "tpcb-like"}, {"script": "own.sql"},
                                {"fresh_copy": True}], ids=["writes", "own-script", "asked"])
def test_a_load_that_may_write_or_a_fresh_copy_asked_for_copies_every_trial(
        trial, monkeypatch, tmp_path, kw):
    made = copies(monkeypatch, tmp_path)
    monkeypatch.setattr(Postgres, "side", lambda self, target: Side())
    if "script" in kw:
        kw = {"script": str(tmp_path / kw["script"])}
        Path(kw["script"]).write_text("SELECT 1;\n")
    w = pg(**kw)
    with filepool.kept():
        for _ in range(2):
            assert w.run(Client(), "4k").info["server_files"] == "fresh"  # type: ignore[arg-type]
    assert len(made) == 2 and not any(p.exists() for p in made)


def test_a_cluster_whose_postmaster_left_its_pid_file_is_not_kept(trial, monkeypatch, tmp_path):
    made = copies(monkeypatch, tmp_path)

    class Unclean(Side):
        def start(self, argv_for_port, tool):
            (made[-1] / "data" / "postmaster.pid").write_text("4242\n")
            return super().start(argv_for_port, tool)
    monkeypatch.setattr(Postgres, "side", lambda self, target: Unclean())
    with filepool.kept():
        pg().run(Client(), "4k")  # type: ignore[arg-type]
        assert filepool.held() == 0 and not made[0].exists()
        assert pg().run(Client(), "4k").info["server_files"] == "fresh"  # type: ignore[arg-type]
    assert len(made) == 2


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


class DomainWay(ScriptedWay):
    """A scripted way into a user's domain (hugelab.workloads.guestside.Way): files in a dict,
    every exec recorded, each program's output scripted; `kill` ends the postmaster (its /proc
    goes); `fail` names a program that exits 1."""

    PID = 4343
    POOL = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"

    def __init__(self, fail: str = "") -> None:
        top, proc = "/var/tmp/hugelab", f"/proc/{self.PID}"
        self.fail = fail
        super().__init__({
            "/proc/net/tcp": f"  sl  local_address\n   0: 0100007F:{15432:04X} 00000000:0000 0A\n",
            f"{top}/postgres.pid": f"{self.PID}\n",
            f"{top}/pgbench.4343": "0 0 120 0 1 1\n0 1 180 0 1 1\n",
            f"{proc}/stat": f"{self.PID} (postgres) S",
            f"{proc}/smaps": "7f0-7f8 rw-s 0 0:0 0 /anon_hugepage (deleted)\nSize: 81920 kB\n"
                             "KernelPageSize: 2048 kB\nShared_Hugetlb: 16384 kB\n",
            self.POOL: "0\n"})

    def exec(self, argv, *, timeout=None):
        self.log.append(list(argv))
        run = argv[4:] if argv[0] == "runuser" else argv  # runuser -u USER -- ARGV
        prog = run[0].rsplit("/", 1)[-1]
        if prog == "kill":
            self.files.pop(f"/proc/{self.PID}/stat", None)
        if (code := self.file_op(prog, run)) is not None:  # a layer's files
            return ExecResult(list(argv), code, "", "", 0.01)
        out = {"ls": "15\n" if run[1:] == ["/usr/lib/postgresql"] else "pgbench.4343\n",
               "psql": "1234\n", "pgbench": "" if "-i" in run else PGBENCH_OUT,
               "postgres": "38\n" if "-C" in run else "postgres (PostgreSQL) 15.14\n"}
        code = 1 if prog == self.fail else 0
        return ExecResult(list(argv), code, out.get(prog, ""), "Job failed" if code else "",
                          0.01)



@pytest.fixture
def no_host_cluster(monkeypatch):
    """A trial in a user's domain builds no template and copies no cluster on this host."""
    monkeypatch.setattr(Postgres, "template", lambda self: pytest.fail("a host template"))
    monkeypatch.setattr(cluster, "bindir", lambda given=None: pytest.fail("the host's bindir"))


def test_a_trial_in_a_users_domain_runs_the_bases_life_cycle_with_its_own_parts(
        no_host_cluster):
    """In a user's domain the base places its server (DomainServers, through InDomain) and
    runs the trial; PostgreSQL's own parts: the guest's binaries linked at a fixed path, its
    cluster made and the guest's pool grown by that server's own count before the start, a
    loopback listener and external_pid_file for the base's readiness, its cluster filled,
    prewarmed and loaded in the guest, its segment read through the way in; every guest change
    undone, and the evidence and info keys of its former whole trial."""
    way = DomainWay()
    w = pg("hugetlb-2M", prewarm=True)
    result = w.run(way, "hugetlb-2M")  # type: ignore[arg-type]
    ran = [(a[4:] if a[0] == "runuser" else a) for a in way.log]
    progs = [a[0].rsplit("/", 1)[-1] for a in ran]
    link, initdb, ask = progs.index("ln"), progs.index("initdb"), progs.index("postgres")
    start, fill = progs.index("systemd-run"), progs.index("pgbench")
    assert ran[link] == ["ln", "-s", "/usr/lib/postgresql/15/bin", "/var/tmp/hugelab/bin"]
    assert ran[initdb][0] == "/var/tmp/hugelab/bin/initdb" and "-C" in ran[ask]
    assert "huge_pages=on" in ran[ask] and "huge_page_size=2MB" in ran[ask]
    loads = [i for i, p in enumerate(progs) if p == "pgbench"]
    assert link < initdb < ask < start < fill < progs.index("psql") < loads[-1]
    assert loads[-1] < progs.index("kill")
    assert "-i" in ran[fill] and ["-T", "1"] == ran[loads[1]][ran[loads[1]].index("-T"):][:2]
    daemon = ran[start]
    assert "--uid=postgres" in daemon and "Type=notify" in daemon
    server_argv = daemon[daemon.index("/var/tmp/hugelab/bin/postgres"):]
    assert server_argv[1:3] == ["-D", "/var/tmp/hugelab/data"]
    for opt in ("listen_addresses=127.0.0.1", "port=15432", "huge_pages=on",
                "unix_socket_directories=/var/tmp/hugelab",
                "external_pid_file=/var/tmp/hugelab/postgres.pid"):
        assert opt in server_argv, opt
    assert way.log[-1] == ["rm", "-rf", "/var/tmp/hugelab"]  # every guest change undone
    assert way.files[DomainWay.POOL] == "0"
    assert result.metrics == pgbench.window_metrics(
        [pgbench.summary(PGBENCH_OUT)], np.array([120.0, 180.0]))
    assert set(result.evidence) == {"KernelPageSize_kB", "Size_kB", "Rss_kB", "AnonHugePages_kB",
                                    "ShmemPmdMapped_kB", "Hugetlb_kB", "mapping", "mapping_role",
                                    "range", "postmaster_pid", "where"}
    assert result.evidence["postmaster_pid"] == DomainWay.PID
    assert result.evidence["Hugetlb_kB"] == 16384 and result.evidence["where"] == "guest vm0"
    info = result.info
    assert list(info) == ["where", "client", "guest_pool", "prewarmed_blocks", "tool",
                          "version", "backing", "settings", "builtin", "bindir", "warnings",
                          "data", "guest_changes_undone"]
    assert info["data"] == "made in the trial"
    assert info["guest_pool"] == {"page_kb": 2048, "before": 0, "set": 38, "server_pages": 38}
    assert info["guest_changes_undone"] == [
        "postgres stopped", f"{DomainWay.POOL} back to 0", "its directory removed"]
    assert info["bindir"] == "/usr/lib/postgresql/15/bin" and info["prewarmed_blocks"] == 1234
    assert info["version"] == "postgres (PostgreSQL) 15.14" and info["client"] == "guest vm0"


def test_a_trial_over_the_domains_layer_moves_its_cluster_in_and_fills_nothing(
        no_host_cluster):
    """Where the domain's layer holds the cluster (hugelab.vm.domains.layer), the trial moves
    it into its directory instead of running initdb, loads no data (pgbench -i) and says so in
    its info; the rest of the trial is the same."""
    from hugelab.workloads.postgres import indomain
    way = DomainWay()
    way.files[f"{indomain.TEMPLATE}/{indomain.LOADED}"] = ""
    way.files[f"{indomain.TEMPLATE}/PG_VERSION"] = "15\n"
    result = pg("hugetlb-2M", prewarm=True).run(way, "hugetlb-2M")  # type: ignore[arg-type]
    ran = [(a[4:] if a[0] == "runuser" else a) for a in way.log]
    progs = [a[0].rsplit("/", 1)[-1] for a in ran]
    assert "initdb" not in progs and not any(p == "pgbench" and "-i" in a
                                             for p, a in zip(progs, ran, strict=True))
    assert ["mv", indomain.TEMPLATE, indomain.DATA] in ran
    assert progs.index("mv") < progs.index("postgres") < progs.index("systemd-run")
    assert result.info["data"] == "the domain's layer"
    assert result.evidence["Hugetlb_kB"] == 16384


def test_the_layers_build_makes_fills_stops_then_keeps_the_cluster(no_host_cluster):
    """The layer's build, in its own copy of the domain: initdb, a server with huge pages off
    (whatever the arm asks: the layer is data), pgbench -i, the cluster marked, the server
    stopped, then the cluster moved to TEMPLATE before the trial's directory goes; the guest
    build's key names its content."""
    from hugelab.workloads.postgres import indomain
    way = DomainWay()
    import dataclasses
    w = dataclasses.replace(pg("hugetlb-2M"), scale=3)
    build = w.guest_build()
    assert build is not None and '"scale": 3' in build.key and "-s 3" in build.what
    build.build(way)  # type: ignore[arg-type]
    ran = [(a[4:] if a[0] == "runuser" else a) for a in way.log]
    progs = [a[0].rsplit("/", 1)[-1] for a in ran]
    fill = next(i for i, a in enumerate(ran) if progs[i] == "pgbench" and "-i" in a)
    assert ran[fill][ran[fill].index("-s") + 1] == "3"
    keep = ran.index(["mv", indomain.DATA, indomain.TEMPLATE])
    assert progs.index("initdb") < progs.index("systemd-run") < fill < progs.index("touch")
    assert progs.index("touch") < progs.index("kill") < keep
    assert ran[keep + 1] == ["rm", "-rf", "/var/tmp/hugelab"]  # then the check that it is kept
    assert ran[-1] == ["test", "-e", f"{indomain.TEMPLATE}/{indomain.LOADED}"]
    daemon = ran[progs.index("systemd-run")]
    assert "huge_pages=off" in daemon and "fsync=off" in daemon
    assert f"{indomain.TEMPLATE}/{indomain.LOADED}" in way.files
    assert pg("4k").guest_build().key != build.key  # type: ignore[union-attr]


def test_a_start_in_a_users_domain_without_its_huge_pages_is_a_busy_pool(no_host_cluster):
    """A failed start says the server's own words (its log, read before the guest's changes
    are undone): a busy pool when it could not map its huge pages."""
    way = DomainWay(fail="systemd-run")
    way.files["/var/tmp/hugelab/server.log"] = \
        "FATAL:  could not map anonymous shared memory: Cannot allocate memory\n"
    with pytest.raises(PoolBusyError, match="could not map anonymous shared memory"):
        pg("hugetlb-2M").run(way, "hugetlb-2M")  # type: ignore[arg-type]
    assert way.log[-1] == ["rm", "-rf", "/var/tmp/hugelab"] and way.files[DomainWay.POOL] == "0"
