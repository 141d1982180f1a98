"""kind = "postgres": pure parts (pgbench output, the segment in smaps, System V rows, settings
from the arm), and a real Debian PostgreSQL 15: a 4k trial evidenced from the postmaster's own
smaps, settings judged by the server, a `try` arm whose pool is too small flagged, and a killed
run whose recover leaves no server, directory or segment behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from hugelab.errors import ExperimentError, WorkloadError
from hugelab.trial.evidence import check_workload
from hugelab.workloads.postgres import pgbench, segment, sysvshm
from hugelab.workloads.postgres.cluster import installed
from hugelab.workloads.postgres.workload import Postgres
from hugelab.workloads.registry import build_workload
from tests.helpers import HUGELAB
from tests.hostguard import host_state, orphan_pg_dsm

needs_pg = pytest.mark.skipif(not installed(), reason="Debian package postgresql not installed")

PGBENCH_OUT = """pgbench (15.14 (Debian 15.14-0+deb12u1))
transaction type: <builtin: select only>
scaling factor: 2
query mode: prepared
number of clients: 4
number of threads: 2
maximum number of tries: 1
duration: 3 s
number of transactions actually processed: 94388
number of failed transactions: 0 (0.000%)
latency average = 0.127 ms
initial connection time = 6.905 ms
tps = 31397.621261 (without initial connection time)
"""

SMAPS = """7f2096cda000-7f209fb72000 rw-s 00000000 00:01 1234                       /dev/zero (deleted)
Size:             146016 kB
KernelPageSize:        4 kB
Rss:               10796 kB
AnonHugePages:         0 kB
ShmemPmdMapped:        0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:       0 kB
7f20a0000000-7f20a0001000 rw-s 00000000 00:01 5                          /SYSV0098409b (deleted)
Size:                  4 kB
KernelPageSize:        4 kB
Rss:                   4 kB
7f3000000000-7f3009800000 rw-s 00000000 00:0f 77                         /anon_hugepage (deleted)
Size:             155648 kB
KernelPageSize:     2048 kB
Rss:                   0 kB
AnonHugePages:         0 kB
ShmemPmdMapped:        0 kB
Shared_Hugetlb:    16384 kB
Private_Hugetlb:       0 kB
"""


def test_pgbench_summary_and_percentiles():
    s = pgbench.summary(PGBENCH_OUT)
    assert s == {"tps": 31397.621261, "latency_avg_ms": 0.127, "transactions": 94388.0,
                 "failed_transactions": 0.0}
    with pytest.raises(WorkloadError, match="no tps line"):
        pgbench.summary("connection to server failed\n")
    lat = np.arange(1, 20001, dtype=float)  # 1..20000 µs
    p = pgbench.percentiles_ms(lat)
    assert p["p50_ms"] == pytest.approx(10.0005, rel=1e-4) and p["p99_9_ms"] > p["p99_ms"]
    few = pgbench.percentiles_ms(np.arange(1, 501, dtype=float))  # p99.9 needs 10,000
    assert "p99_9_ms" not in few and "p95_ms" in few and "p99_ms" not in few


def test_pgbench_argv_and_log_parsing(tmp_path):
    argv = pgbench.argv(Path("/b/pgbench"), Path("/s"), 5432, builtin="select-only",
                        script=None, clients=4, threads=2, seconds=5, transactions=None,
                        log_prefix=tmp_path / "pgbench")
    assert argv[:4] == ["/b/pgbench", "-h", "/s", "-p"] and ["-b", "select-only"] == \
        argv[argv.index("-b"):argv.index("-b") + 2] and argv[-1] == "postgres"
    assert "-T" in argv and "-l" in argv
    (tmp_path / "pgbench.123").write_text("0 0 120 0 1700000000 1\n1 0 300 0 1700000000 2\n")
    (tmp_path / "pgbench.123.1").write_text("2 0 90 0 1700000000 3\n")
    lat = pgbench.log_latencies_us(pgbench.log_files(tmp_path / "pgbench"))
    assert sorted(lat.tolist()) == [90.0, 120.0, 300.0]


def test_segment_is_the_largest_shared_anonymous_mapping():
    ev = segment.check_segment(SMAPS)
    assert ev["mapping"] == "/anon_hugepage (deleted)" and ev["KernelPageSize_kB"] == 2048
    assert ev["Hugetlb_kB"] == 16384 and ev["Size_kB"] == 155648
    assert check_workload("hugetlb-2M", ev).status == "verified"
    assert check_workload("4k", ev).status == "contradicted"
    off = segment.check_segment(SMAPS.split("7f20a0000000")[0])
    assert check_workload("4k", off).status == "verified"
    assert check_workload("hugetlb-2M", off).status == "contradicted"  # a `try` that fell back
    shmem_thp = {**off, "ShmemPmdMapped_kB": 4096}
    assert check_workload("4k", shmem_thp).status == "contradicted"
    assert "error" in segment.check_segment("")


def test_sysv_rows():
    text = ("       key      shmid perms                  size  cpid  lpid nattch   uid   gid"
            "  cuid  cgid      atime      dtime      ctime                   rss          swap\n"
            "   9978011      32788   600                    56 12 13      6   114   121   114"
            "   121 1 2 3 4096 0\n")
    (seg,) = sysvshm.parse(text)
    assert (seg.key, seg.shmid, seg.size, seg.nattch, seg.uid) == (9978011, 32788, 56, 6, 114)
    assert sysvshm.parse("") == []


def test_settings_follow_the_arm_and_bad_input_is_refused():
    w = Postgres(app=(("shared_buffers", "64MB"),), arm_backing="hugetlb-2M")
    assert w.settings() == {"huge_pages": "on", "huge_page_size": "2MB",
                            "shared_buffers": "64MB", "max_connections": 100}
    assert Postgres(arm_backing="4k").settings()["huge_pages"] == "off"  # never `try`
    assert Postgres(app=(("huge_pages", "try"),), arm_backing="hugetlb-1G").settings() == {
        "huge_pages": "try", "huge_page_size": "1GB", "max_connections": 100}
    with pytest.raises(ExperimentError, match="needs a hugetlb backing"):
        Postgres(app=(("huge_pages", "on"),), arm_backing="4k")
    with pytest.raises(ExperimentError, match="not one PostgreSQL"):
        Postgres(arm_backing="thp")
    with pytest.raises(ExperimentError, match="hugelab sets itself"):
        Postgres(app=(("port", 5433),))
    with pytest.raises(ExperimentError, match="huge_pages must be one of"):
        Postgres(app=(("huge_pages", "maybe"),))
    with pytest.raises(ExperimentError, match="unknown builtin"):
        build_workload("postgres", {"builtin": "select"})
    with pytest.raises(ExperimentError, match="unknown key 'arm_backing'"):
        build_workload("postgres", {"arm_backing": "4k"})


@pytest.mark.server
@needs_pg
def test_unknown_setting_is_refused_by_the_server():
    w = Postgres(scale=1, app=(("shared_bufers", "64MB"),))
    with pytest.raises(ExperimentError, match='unrecognized configuration parameter "shared_bufers"'):
        w.for_arm(SimpleNamespace(name="x", backing="4k"))
    size = Postgres(scale=1, app=(("shared_buffers", "64MB"),)).for_arm(
        SimpleNamespace(name="on", backing="hugetlb-2M")).hugetlb_bytes_for(None)
    assert 64 << 20 < size < 96 << 20 and size % (2 << 20) == 0


@pytest.mark.server
@needs_pg
def test_a_4k_trial_is_evidenced_from_the_postmasters_segment():
    from hugelab.trial.native import NativeTarget
    before = sysvshm.segments()
    w = Postgres(scale=1, duration_s=1, warmup_s=0, clients=2, threads=1).for_arm(
        SimpleNamespace(name="off", backing="4k"))
    r = w.run(NativeTarget(), "4k")
    assert r.primary == "tps" and r.value > 0 and r.metrics["p50_ms"] > 0
    assert r.evidence["mapping"] == "/dev/zero (deleted)" and r.evidence["KernelPageSize_kB"] == 4
    assert check_workload("4k", r.evidence).status == "verified"
    assert r.info["settings"]["huge_pages"] == "off"
    pm = r.evidence["postmaster_pid"]  # its own System V segment went with it
    assert not [s for s in sysvshm.segments() if s.cpid == pm and s not in before]


BUFFERED = ("CREATE EXTENSION IF NOT EXISTS pg_buffercache; SELECT (SELECT count(*) FROM "
            "pg_buffercache WHERE relfilenode = pg_relation_filenode('pgbench_accounts')), "
            "pg_relation_size('pgbench_accounts') / 8192")


@pytest.mark.server
@needs_pg
@pytest.mark.parametrize("warm", [True, False])
def test_prewarm_fills_shared_buffers_as_the_servers_own_buffer_cache_shows(warm):
    # the reference is the server's own count of its buffers (pg_buffercache), not hugelab's
    w = Postgres(scale=1, prewarm=warm).for_arm(SimpleNamespace(name="off", backing="4k"))
    srv = w.start("4k")
    try:
        cp = subprocess.run(["psql", "-X", "-A", "-t", "-F", " ", "-h", str(srv.files), "-p",
                             "5432", "-U", "postgres", "-d", "postgres", "-c", BUFFERED],
                            capture_output=True, text=True, check=True)
        cached, blocks = map(int, cp.stdout.split()[-2:])
    finally:
        w.stop(srv)
    assert blocks > 1000  # scale 1: 100,000 rows
    if warm:
        assert cached == blocks and srv.loaded > blocks
    else:
        assert cached < blocks / 10 and srv.loaded == 0


TRY_SMALL_POOL = """name = "pg-try"
seed = 3
blocks = 1
baseline = "off"
[workload]
kind = "postgres"
scale = 1
clients = 2
threads = 1
duration_s = 1
warmup_s = 0
[[arms]]
name = "off"
backing = "4k"
[[arms]]
name = "try"
backing = "hugetlb-2M"
pools = { "2M" = 2 }
app = { huge_pages = "try", shared_buffers = "64MB" }
"""


@pytest.fixture
def pg_env(tmp_path):
    """The environment of a test's hugelab runs: its own state and cluster directories (the
    latter under /var/tmp, which `postgres` can reach), removed whatever the test's outcome."""
    work = Path(f"/var/tmp/hugelab-pg-test-{uuid.uuid4().hex[:8]}")
    yield {**os.environ, "HUGELAB_STATE_DIR": str(tmp_path / "state"),
           "HUGELAB_PG_WORK": str(work)}
    shutil.rmtree(work, ignore_errors=True)


@needs_pg
@pytest.mark.host
def test_try_with_a_pool_too_small_is_flagged_contradicted(tmp_path, pg_env):
    exp = tmp_path / "exp.toml"
    # shared buffers larger than the arm's 2 pages plus whatever free 2 MiB pages others left
    # on this shared host, so that `try` must fall back
    free = int(Path("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages").read_text())
    if free > 2000:
        pytest.skip(f"{free} free 2 MiB pages held by others: a too-small pool cannot be made")
    exp.write_text(TRY_SMALL_POOL.replace('"64MB"', f'"{2 * (free + 64)}MB"'))
    env, before = pg_env, host_state()
    r = subprocess.run([*HUGELAB, "run", str(exp), "--store", str(tmp_path / "s.db")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert "Traceback" not in r.stdout + r.stderr  # exit 1: no ok trial of `try` to compare
    assert "no ok trial for arm(s) try" in r.stderr, r.stdout + r.stderr
    shown = json.loads(subprocess.run([*HUGELAB, "show", "1", "--store", str(tmp_path / "s.db"),
                                       "--json"], capture_output=True, text=True, env=env,
                                      check=True).stdout)
    by_arm = {t["arm"]: t for t in shown["trials"]}
    assert by_arm["off"]["status"] == "ok"
    assert by_arm["try"]["status"] == "flagged", by_arm["try"]
    assert "page size is 4 KiB" in by_arm["try"]["evidence"]["reason"]
    assert host_state() == before
    assert not list(Path(env["HUGELAB_PG_WORK"]).iterdir())


def _servers(work: Path) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and str(work).encode() in (d / "cmdline").read_bytes():
                out.append(int(d.name))
        except OSError:
            continue
    return out


@needs_pg
@pytest.mark.host
def test_sigkill_during_a_trial_then_recover_leaves_nothing(tmp_path, pg_env):
    exp = tmp_path / "exp.toml"
    exp.write_text(TRY_SMALL_POOL.replace("duration_s = 1", "duration_s = 30")
                   .replace('huge_pages = "try"', 'huge_pages = "on"').replace(
                       'pools = { "2M" = 2 }\n', ""))
    env, before = pg_env, host_state()
    work = Path(env["HUGELAB_PG_WORK"])
    shm_before = {s.shmid for s in sysvshm.segments()}
    dsm_before = set(Path("/dev/shm").glob("PostgreSQL.*"))
    pg_uid = cluster_uid()
    p = subprocess.Popen([*HUGELAB, "run", str(exp), "--store", str(tmp_path / "s.db")],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while not any(pgbench_running(pid) for pid in _servers(work)):
            assert p.poll() is None and time.monotonic() < deadline, "no trial started"
            time.sleep(0.1)
        time.sleep(1.0)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    r = subprocess.run([*HUGELAB, "recover"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert not _servers(work), "a server or client of the killed run survived recover"
    assert not [d for d in work.iterdir()], "a cluster directory is left"
    left = [s for s in sysvshm.segments() if s.shmid not in shm_before and s.uid == pg_uid
            and s.nattch == 0]  # others' test servers come and go; an orphan has no one
    assert not left, f"a System V segment is left: {left}"
    assert orphan_pg_dsm() <= dsm_before, "its dynamic shared memory"
    assert host_state() == before


def cluster_uid() -> int:
    from hugelab.workloads.postgres.cluster import user_ids
    return user_ids()[0]


def pgbench_running(pid: int) -> bool:
    try:
        return b"pgbench" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return False


def test_recover_removes_dead_owners_dirs_and_half_built_templates(tmp_path, monkeypatch):
    import fcntl

    from hugelab import identity
    from hugelab.workloads.postgres import cluster, leftovers
    monkeypatch.setenv("HUGELAB_CACHE_DIR", str(tmp_path / "cache"))
    work = tmp_path / "work"
    dead, live = work / "trial-dead", work / "trial-live"
    for d in (dead, live):
        (d / "data").mkdir(parents=True)
    (dead / cluster.OWNER_FILE).write_text(json.dumps({"owner_pid": 1, "owner_starttime": -1,
                                                       "boot_id": identity.boot_id()}))
    (live / cluster.OWNER_FILE).write_text(json.dumps({
        "owner_pid": os.getpid(), "owner_starttime": identity.starttime(os.getpid()),
        "boot_id": identity.boot_id()}))
    cache = tmp_path / "cache" / "postgres"
    (cache / "k1.tmp").mkdir(parents=True)
    (cache / "k2.tmp").mkdir()
    fd = os.open(cache / "k2.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a live build of k2
    try:
        done = leftovers.remove_leftovers(work)
    finally:
        os.close(fd)
    assert not dead.exists() and live.exists()
    assert not (cache / "k1.tmp").exists() and (cache / "k2.tmp").exists()
    assert any(str(dead) in d for d in done)


def test_prewarm_output_is_read_and_a_silent_psql_is_an_error():
    from hugelab.workloads.postgres import prewarm
    assert prewarm.blocks_read("\n1873\n") == 1873
    with pytest.raises(WorkloadError, match="pg_prewarm did not say"):
        prewarm.blocks_read("", "ERROR:  could not open extension control file")
    argv = prewarm.argv("/usr/lib/postgresql/15/bin/psql", "/tmp/x", 5432, "postgres")
    assert argv[-2:] == ["-c", prewarm.SQL] and "ON_ERROR_STOP=1" in argv
