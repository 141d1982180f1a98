"""Issue 37, one job one home: a PostgreSQL workload's user data is checked by one function
(postgres/userdata.check_user_data) for host and domain arms alike, and a server's system
account is looked up by one (owned.account_ids) for PostgreSQL and MariaDB alike."""

from __future__ import annotations

import gzip
import os
from types import SimpleNamespace

import pytest

from hugelab import owned
from hugelab.errors import ExperimentError, ToolMissingError
from hugelab.workloads.mariadb import datadir as mariadb_datadir
from hugelab.workloads.postgres import cluster, userdata
from hugelab.workloads.postgres.workload import Postgres

SCRIPT = "SELECT 1;\n"


def domain_arm(name: str = "in-vm") -> SimpleNamespace:
    return SimpleNamespace(name=name, backing="4k", vm=SimpleNamespace(domain="vm0"))


def test_a_domain_arm_refuses_a_host_datadir_that_a_host_arm_takes(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "PG_VERSION").write_text("15\n")
    script = tmp_path / "load.sql"
    script.write_text(SCRIPT)
    w = Postgres(datadir=str(data), script=str(script))  # a host arm's: taken
    assert w.datadir == str(data)
    with pytest.raises(ExperimentError, match="^arm 'in-vm': postgres: datadir is a data "
                                              "directory of this host; a domain runs the "
                                              "guest's own PostgreSQL$") as ei:
        w.for_arm(domain_arm())
    assert "dump" in (ei.value.hint or "")


def test_a_domain_arm_takes_a_dump_checked_as_on_the_host(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d.dump").write_bytes(b"PGDMP\x01\x0e")
    (tmp_path / "load.sql").write_text(SCRIPT)
    own = Postgres(dump="d.dump", script="load.sql").for_arm(domain_arm())
    assert own.domain_arm and own.dump == os.path.join(tmp_path, "d.dump")  # made absolute
    (tmp_path / "d.sql.gz").write_bytes(gzip.compress(b"CREATE TABLE t (a int);\n"))
    with pytest.raises(ExperimentError, match="a gzip file"):
        userdata.check_user_data(SimpleNamespace(dump="d.sql.gz", datadir=None, conf=None,
                                                 script="load.sql", builtin="tpcb-like",
                                                 domain_arm=True))


def test_a_servers_account_is_looked_up_in_one_place(monkeypatch):
    assert owned.account_ids("root", RuntimeError("no root")) == (0, 0)
    with pytest.raises(LookupError, match="nobody here"):
        owned.account_ids("hugelab-no-such-account", LookupError("nobody here"))
    for module, tool, package in ((cluster, "postgres", "postgresql"),
                                  (mariadb_datadir, "mariadbd", "mariadb-server")):
        monkeypatch.setattr(module, "USER", "hugelab-no-such-account")
        with pytest.raises(ToolMissingError) as ei:
            module.user_ids()
        assert (ei.value.tool, ei.value.package) == (tool, package)
