"""Server kinds in a user's domain, the pure and driver parts (hugelab.workloads.guestside and
the kinds' domain halves) against a scripted way in; the real runs are the domain examples
(tests/test_examples_run.py) and tests/test_vm_user_domain.py."""

from __future__ import annotations

import pytest

from hugelab.errors import ExperimentError, ToolMissingError, WorkloadError
from hugelab.workloads import memcached, redis
from hugelab.workloads.base import ExecResult
from hugelab.workloads.guestside import (
    GUEST_DIR,
    DomainServers,
    GuestSide,
    in_domain,
    refuse_process_thp,
)
from hugelab.workloads.postgres import indomain, pgbench
from hugelab.workloads.postgres.workload import Postgres
from hugelab.workloads.redis import control as redis_control
from hugelab.workloads.serverside import listens
from tests.test_workload_postgres import PGBENCH_OUT

POOL = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
TCP = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
       "   0: 0100007F:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000   0\n"
       "   1: 0100007F:2B67 0100007F:9C40 01 00000000:00000000 00:00000000 00000000   0\n")


class Way:
    """A scripted way into a guest: files in a dict, every exec recorded, exit codes by argv[0]
    (a program in `missing` is not installed)."""

    name = "vm0"
    place = "domain"

    def __init__(self, files: dict[str, str] | None = None, fail: set[str] | None = None,
                 missing: set[str] | None = None, stdout: dict[str, str] | None = None,
                 pool_cap: int | None = None) -> None:
        self.files = dict(files or {})
        self.fail, self.missing = fail or set(), missing or set()
        self.stdout = stdout or {}
        self.pool_cap = pool_cap
        self.log: list[list[str]] = []

    def exec(self, argv: list[str], *, timeout: float | None = None) -> ExecResult:
        self.log.append(list(argv))
        run = argv[4:] if argv[0] == "runuser" else argv  # runuser -u USER -- ARGV
        prog = run[0].rsplit("/", 1)[-1]
        if prog in self.missing:
            raise ToolMissingError(prog, "pkg")
        code = 1 if prog in self.fail else 0
        return ExecResult(list(argv), code, self.stdout.get(prog, ""), "boom" if code else "",
                          0.01)

    def read_file(self, path: str, *, wait_s: float = 60.0) -> str:
        from hugelab.errors import VMError
        if path not in self.files:
            raise VMError(f"cannot read {path}")
        return self.files[path]

    def write_file(self, path: str, data: str, *, wait_s: float = 60.0) -> None:
        if path == POOL and self.pool_cap is not None:
            data = str(min(int(data), self.pool_cap))
        self.files[path] = data


def test_listens_reads_listen_sockets_on_loopback_or_any_only():
    assert listens(TCP, 6379)            # 0x18EB, state 0A (LISTEN)
    assert not listens(TCP, 11111)       # 0x2B67 is an established connection
    assert not listens(TCP, 5432)
    assert listens(TCP.replace("0100007F:18EB", "00000000:18EB"), 6379)


def test_only_a_way_into_a_users_domain_is_in_a_domain():
    assert in_domain(Way())
    assert not in_domain(object())


def test_every_change_is_undone_newest_first_and_named():
    way = Way({POOL: "3\n", "/sys/kernel/mm/transparent_hugepage/enabled":
               "always [madvise] never\n"})
    with GuestSide(way, "postgres") as side:
        side.workdir(owner="postgres")
        side.set_sysfs("/sys/kernel/mm/transparent_hugepage/enabled", "always")
        got = side.grow_pool("hugetlb-2M", 5 * 2048 * 1024 + 1)
        assert got == {"page_kb": 2048, "before": 3, "set": 9, "server_pages": 6}
        assert way.files[POOL] == "9"
    assert way.files[POOL] == "3"  # other users of the pool keep theirs
    assert way.files["/sys/kernel/mm/transparent_hugepage/enabled"] == "madvise"
    assert way.log[-1] == ["rm", "-rf", GUEST_DIR]  # the directory goes last
    assert side.undone[0].startswith(POOL) and side.undone[-1] == "its directory removed"
    assert ["install", "-d", "-m", "0700", "-o", "postgres", GUEST_DIR] in way.log


def test_a_pool_the_guest_cannot_grow_fails_the_trial_and_is_put_back():
    way = Way({POOL: "0"}, pool_cap=2)
    side = GuestSide(way, "postgres")
    with pytest.raises(WorkloadError, match="grew to 2 pages, not the 10"):
        side.grow_pool("hugetlb-2M", 10 * 2048 * 1024)
    side.close()
    assert way.files[POOL] == "0"


def test_a_failed_undo_does_not_stop_the_others():
    way = Way()
    side = GuestSide(way, "redis")

    def broken() -> None:
        raise WorkloadError("guest gone")
    side.later("first", lambda: way.files.update(done="yes"))
    side.later("second", broken)
    side.close()
    assert way.files["done"] == "yes"
    assert side.undone == ["second: failed (guest gone)", "first"]


def test_a_missing_program_names_the_guests_package_and_a_failure_the_guest():
    side = GuestSide(Way(fail={"test", "initdb"}), "postgres")
    with pytest.raises(ToolMissingError) as exc:
        side.need("/usr/lib/postgresql/15/bin/postgres", "postgresql")
    assert "postgresql (in the guest vm0" in str(exc.value.hint)
    with pytest.raises(WorkloadError, match="initdb in guest vm0"):
        side.run(["/usr/lib/postgresql/15/bin/initdb", "-D", "x"], user="postgres")
    assert side.way.log[-1][:4] == ["runuser", "-u", "postgres", "--"]  # type: ignore[attr-defined]


def test_process_thp_is_refused_in_a_domain_with_the_guests_switch_as_hint():
    refuse_process_thp("redis", None)
    with pytest.raises(WorkloadError) as exc:
        refuse_process_thp("redis", "never")
    assert "[arms.guest] thp" in str(exc.value.hint)


def test_daemon_modes_of_redis_and_memcached():
    argv = redis.RedisBenchmark().server_argv(6379)
    d = redis_control.daemon_argv(argv, "/var/tmp/hugelab/redis-server.pid")
    assert d[d.index("--daemonize") + 1] == "yes"
    assert d[-4:] == ["--pidfile", "/var/tmp/hugelab/redis-server.pid",
                      "--logfile", "/var/tmp/hugelab/redis-server.log"]
    assert memcached.daemon_argv(["memcached", "-p", "1"], "/p.pid") == [
        "memcached", "-p", "1", "-d", "-P", "/p.pid"]


def test_a_daemon_is_started_waited_for_read_and_stopped_through_the_way_in():
    pidfile = f"{GUEST_DIR}/redis-server.pid"
    way = Way({pidfile: "42\n", "/proc/net/tcp": TCP,
               "/proc/42/smaps_rollup": "Anonymous: 100 kB\nAnonHugePages: 0 kB\nRss: 200 kB\n",
               "/proc/42/status": "THP_enabled:\t1\n", "/proc/42/smaps": ""})
    handle = DomainServers(way, 6379, redis_control.daemon_argv).start(
        lambda port: ["redis-server", "--port", str(port), "--daemonize", "no"], "redis-server")
    assert handle.client_port == 6379 and handle.pid == 42
    assert handle.memory()["anon_kb"] == 100
    out = handle.stop()
    assert ["kill", "42"] in way.log and way.log[-1] == ["rm", "-rf", GUEST_DIR]
    assert "redis-server stopped" in out


def test_postgres_runs_as_a_transient_service_with_every_setting_as_an_option():
    argv = indomain.server_argv({"huge_pages": "on", "search_path": "a'b", "fsync": False},
                                indomain.PORT)
    assert argv[:3] == [f"{GUEST_DIR}/bin/postgres", "-D", f"{GUEST_DIR}/data"]
    assert "listen_addresses=127.0.0.1" in argv and "port=15432" in argv
    assert f"unix_socket_directories={GUEST_DIR}" in argv
    assert "search_path=a'b" in argv and "fsync=off" in argv  # an argv item, no shell
    d = indomain.daemon_argv(argv, f"{GUEST_DIR}/postgres.pid")
    assert d[:5] == ["systemd-run", "--unit=hugelab-postgres", "--quiet", "--collect",
                     "--uid=postgres"]
    assert d[d.index(argv[0]):] == [*argv, "-c", f"external_pid_file={GUEST_DIR}/postgres.pid"]


def test_postgres_latencies_from_pgbench_logs_texts():
    lat = pgbench.log_latencies_us(["0 1 250 0 1 2\n0 2 750 0 1 2\n", "", "1 1 500 0 1 2\n"])
    assert sorted(lat.tolist()) == [250.0, 500.0, 750.0]


def test_postgres_finds_the_guests_newest_server():
    side = GuestSide(Way(stdout={"ls": "13\n15\nfoo\n"}), "postgres")
    assert indomain.find_bindir(side, None) == "/usr/lib/postgresql/15/bin"
    none = GuestSide(Way(stdout={"ls": ""}, fail={"test"}), "postgres")
    with pytest.raises(ToolMissingError, match="postgres"):
        indomain.find_bindir(none, None)


def test_postgres_users_data_in_a_domain(tmp_path):
    plain = tmp_path / "d.sql"
    plain.write_text("CREATE TABLE t (a int);\n")
    custom = tmp_path / "d.dump"
    custom.write_bytes(b"PGDMP\x01\x0e")
    script = tmp_path / "load.sql"
    script.write_text("SELECT a FROM t;\n")
    from hugelab.workloads.postgres import userdata
    userdata.check_user_data(_with(Postgres(dump=str(plain), script=str(script)),
                                   domain_arm=True))
    assert userdata.check_dump(str(custom)) == "custom" and userdata.check_dump(str(plain)) == "plain"
    with pytest.raises(ExperimentError, match="guest's own PostgreSQL"):
        userdata.check_user_data(_with(Postgres(dump=str(plain), script=str(script)),
                                       dump=None, datadir=str(tmp_path), domain_arm=True))


def _with(w: Postgres, **fields: object) -> Postgres:
    """`w` with fields set past its own checks (what a domain arm's check sees)."""
    for k, v in fields.items():
        object.__setattr__(w, k, v)
    return w


def test_mariadb_runs_as_a_transient_service_with_the_trials_pid_file():
    from hugelab.workloads.mariadb import indomain as mdb
    argv = ["/usr/sbin/mariadbd", "--no-defaults", "--pid-file=/x/pid", "--port=3306"]
    assert mdb.daemon_argv(argv, f"{GUEST_DIR}/mariadbd.pid") == [
        "systemd-run", "--unit=hugelab-mariadbd", "--quiet", "--collect", "/usr/sbin/mariadbd",
        "--no-defaults", "--port=3306", f"--pid-file={GUEST_DIR}/mariadbd.pid"]


@pytest.mark.parametrize("fmt", ["custom", "plain"])
def test_postgres_restores_a_dump_in_a_domain_as_on_the_host(tmp_path, fmt):
    """A user's dump in a domain is restored by the host's steps (userdata.restore_argv, then
    analyze_argv): no owners, grants or tablespaces, then ANALYZE."""
    from pathlib import Path

    from hugelab.workloads.postgres import userdata
    dump = tmp_path / "d.dump"
    if fmt == "custom":
        dump.write_bytes(b"PGDMP\x01\x0e pgbench_accounts")
    else:
        dump.write_text("CREATE TABLE pgbench_accounts (aid int);\n")
    way = Way(stdout={"ls": "pgbench.1\n", "pgbench": PGBENCH_OUT}, fail={"test"})  # no layer
    way.files[f"{GUEST_DIR}/pgbench.1"] = "0 0 120 0 1 1\n"
    way.write_bytes = lambda path, data, **_: way.files.__setitem__(path, data)  # type: ignore[attr-defined]
    indomain.load(Postgres(dump=str(dump), prewarm=False, warmup_s=0), way)  # type: ignore[arg-type]
    ran = [a[4:] for a in way.log if a[0] == "runuser"]  # runuser -u postgres -- ARGV
    guest_dump = Path(ran[0][-1])
    assert guest_dump.parent == Path(GUEST_DIR) and str(guest_dump) in way.files
    bin_dir, top = Path(indomain.BIN), Path(GUEST_DIR)
    assert ran[:2] == [userdata.restore_argv(bin_dir, fmt, guest_dump, top, indomain.PORT),
                       userdata.analyze_argv(bin_dir, top, indomain.PORT)]
    assert ran[2][0] == f"{bin_dir}/pgbench" and "-i" not in ran[2]  # then the load
