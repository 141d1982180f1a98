"""kind = "mariadb" from the user's own data: an SQL dump (loaded once with the mariadb client
into a datadir cached by its sha256 and the server's version) or a datadir of theirs (copied per
trial, never opened in place), loaded by their own sysbench Lua script; the built-in OLTP
scripts refused before any trial when the data has no sbtest tables. Pure parts with plain
inputs, then a real MariaDB 10.11: a dump's trials with --large-pages off and on, and a trial
from a datadir whose every file is the same afterwards."""

from __future__ import annotations

import hashlib
import shutil
import uuid
from pathlib import Path

import pytest

from hugelab.checks import VERIFIED
from hugelab.errors import ExperimentError
from hugelab.experiment import Arm
from hugelab.host.session import host_session
from hugelab.trial.native import NativeTarget
from hugelab.workloads.mariadb import oltp, userdata
from hugelab.workloads.mariadb.workload import Mariadb, check
from hugelab.workloads.registry import build_workload
from tests.hostguard import host_state

LOAD = """function thread_init()
  con = sysbench.sql.driver():connect()
end
function event()
  con:query(string.format("SELECT name, price FROM items WHERE id = %d",
                          sysbench.rand.uniform(1, 400)))
end
function thread_done()
  con:disconnect()
end
"""


def dump_text(database: str | None = None) -> str:
    rows = ",".join(f"({i},'item {i}',{i * 1.5})" for i in range(1, 401))
    head = f"CREATE DATABASE `{database}`;\nUSE `{database}`;\n" if database else ""
    return (head + "CREATE TABLE `items` (id INT PRIMARY KEY, name VARCHAR(40) NOT NULL, "
            f"price DECIMAL(10,2)) ENGINE=InnoDB;\nINSERT INTO `items` VALUES {rows};\n")


def test_sbtest_tables_are_found_in_a_dump_across_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(userdata, "CHUNK", 16)
    dump = tmp_path / "d.sql"
    dump.write_text("-- x\n" * 5 + "CREATE TABLE `sbtest1` (\n  `id` int)\n")
    assert userdata.creates_sbtest(dump)
    dump.write_text(dump_text())
    assert not userdata.creates_sbtest(dump)


def test_a_builtin_script_is_refused_without_sbtest_tables(tmp_path):
    dump = tmp_path / "shop.sql"
    dump.write_text(dump_text())
    with pytest.raises(ExperimentError, match="needs sysbench's sbtest tables") as exc:
        build_workload("mariadb", {"dump": str(dump)})
    assert ".lua" in (exc.value.hint or "")
    data = tmp_path / "data"
    (data / "mysql").mkdir(parents=True)
    with pytest.raises(ExperimentError, match="the datadir has none"):
        Mariadb(datadir=str(data))
    (data / "sbtest").mkdir()
    for i in (1, 2):
        (data / "sbtest" / f"sbtest{i}.frm").write_bytes(b"")
    assert Mariadb(datadir=str(data)).datadir == str(data)
    with pytest.raises(ExperimentError, match="the datadir has none"):
        Mariadb(datadir=str(data), tables=3)
    with pytest.raises(ExperimentError, match="not both"):
        Mariadb(datadir=str(data), dump=str(dump))
    with pytest.raises(ExperimentError, match="no mysql/ system database"):
        Mariadb(datadir=str(tmp_path), script="/x.lua")
    with pytest.raises(ExperimentError, match="not a plain name"):
        Mariadb(database="shop`; DROP", script="/x.lua")
    with pytest.raises(ExperimentError, match="is not a file"):
        Mariadb(dump=str(tmp_path / "none.sql"), script="/x.lua")


def test_load_argv_key_and_the_loads_database():
    assert userdata.load_argv(Path("/t/sock"), "shop", Path("/d/shop.sql")) == [
        "mariadb", "--socket=/t/sock", "-uroot", "shop", "-e", "source /d/shop.sql"]
    key = userdata.dump_key("10.11.6", "ab" * 32, "sbtest")
    assert key.startswith("dump-") and len({key, userdata.dump_key("10.11.7", "ab" * 32,
                                                                   "sbtest"),
                                            userdata.dump_key("10.11.6", "ab" * 32,
                                                              "shop")}) == 3
    assert "--mysql-db=shop" in oltp.argv("/x.lua", 3306, 1, 10, 1, 1, database="shop")


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


def tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        h.update(f"{p.relative_to(root)} {st.st_mode} {st.st_uid}\n".encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture
def maria_env(tmp_path, monkeypatch):
    work = Path(f"/var/tmp/hugelab-mariadb-test-{uuid.uuid4().hex[:8]}")
    for k, v in (("HUGELAB_STATE_DIR", tmp_path / "state"), ("HUGELAB_MARIADB_WORK", work),
                 ("HUGELAB_CACHE_DIR", tmp_path / "cache")):
        monkeypatch.setenv(k, str(v))
    yield work
    shutil.rmtree(work, ignore_errors=True)


@pytest.mark.host
@pytest.mark.slow
@pytest.mark.server
def test_a_users_dump_and_datadir_with_their_own_load(tmp_path, maria_env):
    dump, load = tmp_path / "shop.sql", tmp_path / "load.lua"
    dump.write_text(dump_text("shop"))
    load.write_text(LOAD)
    dump_sum = hashlib.sha256(dump.read_bytes()).hexdigest()
    before = host_state()
    w = Mariadb(script=str(load), dump=str(dump), database="shop", threads=1, duration_s=1,
                warmup_s=0, buffer_pool="32M")
    on, off = w.for_arm(Arm("on", "hugetlb-2M")), w.for_arm(Arm("off", "4k"))
    with host_session(journal_path=tmp_path / "state" / "j") as control:
        control.ensure_free(2048, on.hugetlb_bytes_for("2M") // (2 << 20))
        r_on, r_off = on.run(NativeTarget(), "hugetlb-2M"), off.run(NativeTarget(), "4k")
    for r in (r_on, r_off):
        assert r.value > 0 and check(r.evidence).status == VERIFIED, r.evidence  # type: ignore[union-attr]
        assert r.info["user_data"] == {"dump": str(dump)}
    assert r_on.evidence["mariadb"]["mappings"] and not r_off.evidence["mariadb"]["mappings"]
    (template,) = [p for p in (tmp_path / "cache" / "mariadb").glob("dump-*") if p.is_dir()]
    users = tmp_path / "users-datadir"  # a stopped server's datadir, owned by someone else
    shutil.copytree(template, users, symlinks=True)
    digest = tree_digest(users)
    d = Mariadb(script=str(load), datadir=str(users), database="shop", threads=1,
                duration_s=1, warmup_s=0, buffer_pool="32M").for_arm(Arm("off", "4k"))
    r = d.run(NativeTarget(), "4k")
    assert r.value > 0 and r.info["user_data"] == {"datadir": str(users)}
    assert tree_digest(users) == digest
    assert hashlib.sha256(dump.read_bytes()).hexdigest() == dump_sum
    assert not list(maria_env.glob("*-*")), "a datadir copy is left"
    assert host_state() == before and not servers(maria_env)
