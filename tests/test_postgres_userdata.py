"""kind = "postgres" from the user's own data and settings: a pg_dump file (its format read from
its content, restored once into a template cached by its sha256 and the server's version), a
data directory (copied per trial, never opened in place), a postgresql.conf (its settings under
the arm's, hugelab's own kept and warned about); pure parts with plain inputs, then a real
PostgreSQL 15 run of a small schema from a dump, huge_pages off and on, and a trial from a data
directory whose every file is the same afterwards."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from hugelab.errors import ExperimentError
from hugelab.trial.evidence import check_workload
from hugelab.workloads.postgres import cluster, server, userconf, userdata
from hugelab.workloads.postgres.cluster import installed
from hugelab.workloads.postgres.workload import Postgres
from tests.helpers import HUGELAB
from tests.hostguard import host_state

needs_pg = pytest.mark.skipif(not installed(), reason="Debian package postgresql not installed")
SCHEMA = """CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL, price numeric);
INSERT INTO items SELECT g, 'item ' || g, g * 1.5 FROM generate_series(1, 400) g;
CREATE TABLE orders (id serial PRIMARY KEY, item int REFERENCES items (id), qty int);
INSERT INTO orders (item, qty) SELECT 1 + g % 400, g % 7 FROM generate_series(1, 300) g;
"""
SCRIPT = """\\set id random(1, 400)
SELECT i.name, sum(o.qty) FROM items i LEFT JOIN orders o ON o.item = i.id
 WHERE i.id = :id GROUP BY i.name;
SELECT body FROM notes WHERE id = :id % 50;
"""
CONF = """# the user's settings
shared_buffers = '32MB'        # under the arm's app
work_mem 8MB
huge_pages = try               # hugelab's: the arm's value wins, with a warning
log_line_prefix = '%m [%p] it''s '
"""


# -- pure parts ---------------------------------------------------------------------------

def test_postgresql_conf_is_read_as_postgresql_reads_it():
    items = userconf.parse(CONF)
    assert items == [("shared_buffers", "32MB"), ("work_mem", "8MB"), ("huge_pages", "try"),
                     ("log_line_prefix", "%m [%p] it's ")]
    assert userconf.parse("Port=5433\nx = 'a\\'b' # c\n") == [("port", "5433"), ("x", "a'b")]
    with pytest.raises(ExperimentError, match=r"my.conf:2: cannot read"):
        userconf.parse("a = 1\n= 2\n", "my.conf")
    with pytest.raises(ExperimentError, match="unterminated"):
        userconf.parse("a = 'open\n")


def test_settings_hugelab_owns_are_kept_from_the_users_conf_and_warned_about():
    items = userconf.parse(CONF + "port = 5999\ndata_directory = '/srv/pg'\n")
    assert userconf.kept(items) == {"shared_buffers": "32MB", "work_mem": "8MB",
                                    "log_line_prefix": "%m [%p] it's "}
    said = userconf.warnings(items, {"huge_pages": "off"}, "my.conf")
    assert len(said) == 3
    assert said[0] == "my.conf sets huge_pages = 'try', which hugelab owns: this arm runs " \
                      "with huge_pages = off"
    assert "port = '5999'" in said[1] and "data_directory" in said[2]
    assert userconf.warnings(userconf.parse("work_mem = 1MB\n"), {}, "x") == []


def test_a_conf_with_includes_is_refused(tmp_path):
    conf = tmp_path / "pg.conf"
    conf.write_text("work_mem = 4MB\ninclude_dir 'conf.d'\n")
    with pytest.raises(ExperimentError, match="uses include_dir"):
        Postgres(conf=str(conf))


def test_the_workloads_settings_put_the_users_under_the_arms(tmp_path):
    conf = tmp_path / "pg.conf"
    conf.write_text(CONF)
    w = Postgres(conf=str(conf), app=(("shared_buffers", "64MB"),), arm_backing="hugetlb-2M")
    assert w.settings() == {"work_mem": "8MB", "log_line_prefix": "%m [%p] it's ",
                            "huge_pages": "on", "huge_page_size": "2MB",
                            "shared_buffers": "64MB", "max_connections": 100}
    assert Postgres(conf=str(conf)).settings("4k")["huge_pages"] == "off"
    assert w.settings_warnings("hugetlb-2M") == [f"{conf} sets huge_pages = 'try', which hugelab owns: "
                                        "this arm runs with huge_pages = on"]
    assert Postgres().settings_warnings() == []


def test_a_dumps_format_is_read_from_its_content():
    assert userdata.dump_format(b"PGDMP\x01\x0e\x00") == "custom"
    assert userdata.dump_format(b"\0" * 257 + b"ustar\x0000") == "tar"
    assert userdata.dump_format(b"--\n-- PostgreSQL database dump\n") == "plain"
    with pytest.raises(ValueError, match="gzip"):
        userdata.dump_format(b"\x1f\x8b\x08\x00")
    with pytest.raises(ValueError, match="not a pg_dump"):
        userdata.dump_format(b"\x7fELF\x02\x01\x01\0")


def test_restore_argv_and_the_templates_key():
    b, sock = Path("/b"), Path("/s")
    assert userdata.restore_argv(b, "plain", Path("/d.sql"), sock, 5432) == [
        "/b/psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "/s", "-p", "5432", "-U",
        "postgres", "-d", "postgres", "-f", "/d.sql"]
    assert userdata.restore_argv(b, "custom", Path("/d.dump"), sock, 5432) == [
        "/b/pg_restore", "--no-owner", "--no-privileges", "--no-tablespaces", "--exit-on-error",
        "-h", "/s", "-p", "5432", "-U", "postgres", "-d", "postgres", "/d.dump"]
    key = userdata.dump_key("15.14", "ab" * 32, "plain")
    assert key.startswith("dump-") and key == userdata.dump_key("15.14", "ab" * 32, "plain")
    assert len({key, userdata.dump_key("15.15", "ab" * 32, "plain"),
                userdata.dump_key("15.14", "cd" * 32, "plain")}) == 3


def test_table_names_are_found_across_read_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(userdata, "CHUNK", 16)
    f = tmp_path / "d.sql"
    f.write_text("x" * 10 + "CREATE TABLE public.pgbench_accounts (aid int);\n")
    assert userdata.names_in_file(f, ("pgbench_accounts", "pgbench_tellers")) == \
        {"pgbench_accounts"}


def test_a_builtin_script_without_pgbenchs_tables_is_refused(tmp_path):
    dump = tmp_path / "shop.sql"
    dump.write_text(SCHEMA)
    with pytest.raises(ExperimentError, match="has no pgbench_accounts") as exc:
        Postgres(dump=str(dump))
    assert "script" in (exc.value.hint or "")
    dump.write_text(SCHEMA + "CREATE TABLE pgbench_accounts (aid int);\n")
    with pytest.raises(ExperimentError, match="has no pgbench_branches"):
        Postgres(dump=str(dump), builtin="tpcb-like")
    Postgres(dump=str(dump))  # select-only needs only pgbench_accounts
    script = tmp_path / "q.sql"
    script.write_text(SCRIPT)
    w = Postgres(dump=os.path.relpath(dump), script=str(script))
    assert w.dump == str(dump)  # absolute: a guest or a later cwd finds the same file


def test_a_data_directory_is_checked_before_any_trial(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    with pytest.raises(ExperimentError, match="no PG_VERSION"):
        Postgres(datadir=str(d), script=__file__)
    (d / "PG_VERSION").write_text("14\n")
    with pytest.raises(ExperimentError, match="has no pgbench_accounts"):
        Postgres(datadir=str(d))
    with pytest.raises(ExperimentError, match="PostgreSQL 14, this server is 15.4") as exc:
        userdata.check_major(str(d), "15.4")
    assert "/usr/lib/postgresql/14/bin" in (exc.value.hint or "")
    (d / "postmaster.pid").write_text("123\n")
    with pytest.raises(ExperimentError, match="may be running"):
        Postgres(datadir=str(d), script=__file__)
    with pytest.raises(ExperimentError, match="not both"):
        Postgres(datadir=str(d), dump=__file__, script=__file__)


def test_the_server_is_always_told_its_copys_own_files():
    cd = cluster.ClusterDir(Path("/w/trial-1"))
    opts = server.server_options(cd, {"huge_pages": "off"})
    pairs = dict(o.split("=", 1) for o in opts[1::2])
    assert pairs["data_directory"] == "/w/trial-1/data"
    assert pairs["hba_file"] == "/w/trial-1/data/pg_hba.conf"
    assert pairs["listen_addresses"] == "" and pairs["huge_pages"] == "off"


# -- real PostgreSQL ----------------------------------------------------------------------

def tree_digest(root: Path) -> str:
    """sha256 over every file's path, mode, owner and content under `root`."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        h.update(f"{p.relative_to(root)} {st.st_mode} {st.st_uid}\n".encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def pg_env(tmp_path, monkeypatch):
    """Private cluster and cache directories (clusters under /var/tmp, which `postgres` can
    reach), removed whatever the test's outcome."""
    work = Path(f"/var/tmp/hugelab-pg-test-{uuid.uuid4().hex[:8]}")
    env = {"HUGELAB_STATE_DIR": str(tmp_path / "state"), "HUGELAB_PG_WORK": str(work),
           "HUGELAB_CACHE_DIR": str(tmp_path / "cache")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    yield {**os.environ, **env}
    shutil.rmtree(work, ignore_errors=True)


def servers(work: Path) -> list[int]:
    """Live processes that run on this test's private directories (others' tests may run
    other servers meanwhile)."""
    out = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and str(work).encode() in (d / "cmdline").read_bytes():
                out.append(int(d.name))
        except OSError:
            continue
    return out


TABLESPACE = """CREATE TABLESPACE elsewhere LOCATION '{where}';
CREATE TABLE notes (id int, body text) TABLESPACE elsewhere;
INSERT INTO notes SELECT g, 'note ' || g FROM generate_series(1, 50) g;
"""


def users_database(out: Path) -> dict[str, Path]:
    """A user's small schema in a cluster of their own, as a custom-format dump, a plain one,
    and the stopped cluster's data directory, whose WAL and one tablespace live outside it
    (symbolic links, as `initdb -X` and CREATE TABLESPACE make them); and their pgbench
    script."""
    b = cluster.bindir()
    with cluster.private_dir("user") as cd:
        cluster.as_postgres([b / "initdb", "-D", cd.data, "--auth=trust", "-U", "postgres",
                             "--no-sync", "-X", cd.top / "wal"])
        cluster.as_postgres(["mkdir", cd.top / "ts"])
        srv = server.start(b, cd, {"huge_pages": "off", "fsync": "off"})
        conn = ["-h", str(cd.top), "-p", str(server.PORT), "-U", "postgres"]
        try:
            subprocess.run([b / "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", *conn, "-d",
                            "postgres", "-c", SCHEMA], check=True, capture_output=True)
            for sql in TABLESPACE.format(where=cd.top / "ts").strip().splitlines():
                subprocess.run([b / "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", *conn,
                                "-d", "postgres", "-c", sql], check=True, capture_output=True)
            subprocess.run([b / "pg_dump", *conn, "-Fc", "-f", out / "shop.dump", "postgres"],
                           check=True)
            subprocess.run([b / "pg_dump", *conn, "--no-tablespaces", "-f", out / "shop.sql",
                            "postgres"], check=True)
        finally:
            srv.stop()
        for name in ("data", "wal", "ts"):
            subprocess.run(["cp", "-a", cd.top / name, out / f"user-{name}"], check=True)
    data = out / "user-data"
    (data / "pg_wal").unlink()
    (data / "pg_wal").symlink_to(out / "user-wal")
    (link,) = (data / "pg_tblspc").iterdir()
    link.unlink()
    link.symlink_to(out / "user-ts")
    (out / "query.sql").write_text(SCRIPT)
    (out / "my.conf").write_text(CONF)
    return {k: out / n for k, n in (("custom", "shop.dump"), ("plain", "shop.sql"),
                                    ("datadir", "user-data"), ("script", "query.sql"),
                                    ("conf", "my.conf"))}


EXPERIMENT = """name = "pg-your-dump"
seed = 5
blocks = 1
baseline = "off"
[workload]
kind = "postgres"
dump = "{dump}"
script = "{script}"
conf = "{conf}"
clients = 2
threads = 1
duration_s = 1
warmup_s = 0
[[arms]]
name = "off"
backing = "4k"
[[arms]]
name = "on"
backing = "hugetlb-2M"
app = {{ huge_pages = "on" }}
"""


@needs_pg
@pytest.mark.host
@pytest.mark.slow
@pytest.mark.server
def test_a_users_dump_runs_with_huge_pages_off_and_on_and_is_left_untouched(tmp_path, pg_env):
    files = users_database(tmp_path)
    sums = {k: file_digest(files[k]) for k in ("custom", "script", "conf")}
    exp = tmp_path / "exp.toml"
    exp.write_text(EXPERIMENT.format(dump=files["custom"], script=files["script"],
                                     conf=files["conf"]))
    before = host_state()
    store = str(tmp_path / "s.db")
    r = subprocess.run([*HUGELAB, "run", str(exp), "--store", store], capture_output=True,
                       text=True, env=pg_env, timeout=600)
    assert r.returncode == 0 and "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr
    shown = json.loads(subprocess.run([*HUGELAB, "show", "1", "--store", store, "--json"],
                                      capture_output=True, text=True, env=pg_env,
                                      check=True).stdout)
    by_arm = {t["arm"]: t for t in shown["trials"]}
    assert set(by_arm) == {"off", "on"}
    for arm, page_kb in (("off", 4), ("on", 2048)):
        t = by_arm[arm]
        assert t["status"] == "ok", t
        ev = t["evidence"]
        assert ev["check"] == "verified", ev
        assert ev["KernelPageSize_kB"] == page_kb and ev["Size_kB"] >= 32 << 10, ev
        info = t["provenance"]  # the trial's info is kept there
        assert info["settings"]["work_mem"] == "8MB" and info["settings"]["huge_pages"] == arm
        assert info["user_data"] == {"dump": str(files["custom"]), "conf": str(files["conf"])}
        assert info["warnings"] == [f"{files['conf']} sets huge_pages = 'try', which hugelab "
                                    f"owns: this arm runs with huge_pages = {arm}"]
        assert t["metrics"]["tps"] > 0 and t["metrics"]["transactions"] > 0
    assert by_arm["on"]["evidence"]["Hugetlb_kB"] > 0
    assert {k: file_digest(files[k]) for k in sums} == sums
    templates = [p for p in (tmp_path / "cache" / "postgres").glob("dump-*") if p.is_dir()]
    assert len(templates) == 1  # restored once, for both arms
    assert not list(Path(pg_env["HUGELAB_PG_WORK"]).iterdir()), "a cluster copy is left"
    assert host_state() == before and not servers(Path(pg_env["HUGELAB_PG_WORK"]))


@needs_pg
@pytest.mark.slow
@pytest.mark.server
def test_a_data_directory_and_a_plain_dump_each_run_a_trial_and_stay_as_they_were(
        tmp_path, pg_env):
    from hugelab.trial.native import NativeTarget
    files = users_database(tmp_path)
    data = files["datadir"]
    with (data / "postgresql.conf").open("a") as f:  # a conf that names the original itself
        f.write(f"data_directory = '{data}'\nport = 5999\n")
    outside = [tmp_path / "user-wal", tmp_path / "user-ts"]  # its links' targets
    assert (data / "pg_wal").is_symlink() and all(p.is_dir() for p in outside)
    before = [tree_digest(p) for p in (data, *outside)], file_digest(files["plain"])
    arm = SimpleNamespace(name="off", backing="4k")
    said = {}
    for name, source in (("datadir", {"datadir": str(data)}),
                         ("plain", {"dump": str(files["plain"])})):
        w = Postgres(script=str(files["script"]), clients=2, threads=1, duration_s=1,
                     warmup_s=0, **source).for_arm(arm)  # type: ignore[arg-type]
        r = w.run(NativeTarget(), "4k")
        assert r.value > 0 and check_workload("4k", r.evidence).status == "verified"
        assert r.info["user_data"] == source
        said[name] = r.info["warnings"]
    assert said["plain"] == []
    assert len(said["datadir"]) == 2 and all(w.startswith(f"{data}/postgresql.conf sets ")
                                              for w in said["datadir"]), said
    assert ([tree_digest(p) for p in (data, *outside)], file_digest(files["plain"])) == before
    assert not list(Path(pg_env["HUGELAB_PG_WORK"]).iterdir()), "a cluster copy is left"


@needs_pg
@pytest.mark.server  # the dry run asks the server (postgres -C) each arm's settings
def test_the_dry_run_says_which_of_the_users_settings_each_arm_overrides(tmp_path, pg_env):
    conf = tmp_path / "my.conf"
    conf.write_text(CONF)
    exp = tmp_path / "exp.toml"
    exp.write_text(f'name = "dry"\nblocks = 1\n[workload]\nkind = "postgres"\nscale = 1\n'
                   f'conf = "{conf}"\n[[arms]]\nname = "off"\nbacking = "4k"\n[[arms]]\n'
                   'name = "on"\nbacking = "hugetlb-2M"\n')
    r = subprocess.run([*HUGELAB, "run", str(exp), "--dry-run", "--json", "--store",
                        str(tmp_path / "s.db")], capture_output=True, text=True, env=pg_env,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    said = [w for w in json.loads(r.stdout)["warnings"] if str(conf) in w]
    assert said == [f"arm '{arm}': {conf} sets huge_pages = 'try', which hugelab owns: this "
                    f"arm runs with huge_pages = {arm}" for arm in ("off", "on")]


def test_a_refused_setting_is_found_in_the_users_conf(tmp_path):
    conf = tmp_path / "my.conf"
    conf.write_text("# mine\nShared_Bufers = '32MB'   # typo\nwork_mem = 4MB\nwork_mem = 8MB\n")
    said = ("postgres failed (1): /usr/lib/postgresql/15/bin/postgres -D /x -c a=b\n"
            "LOG: starting\n"
            '2026-11-30 FATAL:  unrecognized configuration parameter "shared_bufers"')
    assert userconf.refused_name(said) == "shared_bufers"
    assert userconf.line_of(str(conf), "shared_bufers") == \
        f"{conf}:2: Shared_Bufers = '32MB'   # typo"
    assert userconf.line_of(str(conf), "work_mem") == f"{conf}:4: work_mem = 8MB"  # the last
    assert userconf.line_of(str(conf), "port") is None
    assert userconf.refused_name("postgres failed (1): out of memory") is None
    items = userconf.parse(conf.read_text())
    bad = 'invalid value for parameter "work_mem": "x"'
    assert userconf.refused_line(str(conf), items, (), bad) == f"{conf}:4: work_mem = 8MB"
    assert userconf.refused_line(str(conf), items, (("work_mem", "x"),), bad) is None  # app's
    assert userconf.refused_line(None, items, (), bad) is None
    # the server's words, not its argv nor its LOG lines
    assert userconf.server_words(said) == \
        'FATAL:  unrecognized configuration parameter "shared_bufers"'
    assert userconf.server_words("no server words") == "no server words"


@pytest.mark.slow
@pytest.mark.server  # the run asks the server (postgres -C) each arm's settings
def test_a_setting_the_server_refuses_names_the_users_conf_line(tmp_path, pg_env):
    """It named neither file nor line, after 400 characters of postgres' argv."""
    conf = tmp_path / "my.conf"
    conf.write_text("work_mem = 4MB\nshared_bufers = '32MB'\n")
    exp = tmp_path / "exp.toml"
    exp.write_text(f'name = "typo"\nblocks = 1\n[workload]\nkind = "postgres"\nscale = 1\n'
                   f'conf = "{conf}"\n[[arms]]\nname = "off"\nbacking = "4k"\n')
    r = subprocess.run([*HUGELAB, "run", str(exp), "--store", str(tmp_path / "s.db")],
                       capture_output=True, text=True, env=pg_env, timeout=600)
    flat = " ".join(r.stderr.split())
    assert r.returncode == 2 and "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr
    assert f"postgres refused a setting of your conf, {conf}:2: shared_bufers = '32MB': FATAL: " \
        'unrecognized configuration parameter "shared_bufers"' in flat, r.stderr
    assert "fix or remove that line" in flat and " -D " not in flat
    # the arm's own value of a setting the conf has too is the arm's, not the conf's
    conf.write_text("work_mem = 4MB\n")
    exp.write_text(exp.read_text() + 'app = { work_mem = "lots" }\n')
    r = subprocess.run([*HUGELAB, "run", str(exp), "--store", str(tmp_path / "s.db")],
                       capture_output=True, text=True, env=pg_env, timeout=600)
    flat = " ".join(r.stderr.split())
    assert r.returncode == 2 and "postgres refused its settings: " in flat, r.stderr
    assert 'parameter "work_mem"' in flat and "a setting of your conf" not in flat
    dump = tmp_path / "broken.sql"  # plain SQL with pgbench's table: the restore fails
    dump.write_text("CREATE TABLE pgbench_accounts (aid int);\nthis is not SQL;\n")
    exp.write_text(f'name = "garbage"\nblocks = 1\n[workload]\nkind = "postgres"\n'
                   f'dump = "{dump}"\nbuiltin = "select-only"\n[[arms]]\nname = "off"\n'
                   'backing = "4k"\n')
    r = subprocess.run([*HUGELAB, "run", str(exp), "--store", str(tmp_path / "s.db")],
                       capture_output=True, text=True, env=pg_env, timeout=600)
    flat = " ".join(r.stderr.split())
    assert r.returncode == 2 and "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr
    assert f"arm 'off': your dump {dump} could not be made ready: restoring the dump failed" \
        in flat and "refused" not in flat, r.stderr


@needs_pg
@pytest.mark.tools  # chown, to the postgres user
def test_the_servers_questions_get_a_copy_of_the_settings_only(tmp_path, pg_env):
    src = tmp_path / "data"
    for d in ("base/1", "pg_wal", "global", "pg_tblspc"):
        (src / d).mkdir(parents=True)
    (src / "base/1/1259").write_bytes(b"x" * 4096)
    (src / "pg_wal/000000010000000000000001").write_bytes(b"w" * 4096)
    (src / "PG_VERSION").write_text("15\n")
    (src / "global/pg_control").write_bytes(b"c")
    with cluster.private_dir("t") as cd:
        userdata.copy_datadir(src, cd, settings_only=True)
        got = sorted(str(p.relative_to(cd.data)) for p in cd.data.rglob("*"))
        owner = {p.stat().st_uid for p in cd.data.rglob("*")} | {cd.data.stat().st_uid}
    assert got == ["PG_VERSION", "base", "global", "global/pg_control", "pg_hba.conf",
                   "pg_ident.conf", "pg_tblspc", "pg_wal", "postgresql.conf"]
    assert owner == {cluster.user_ids()[0]}
