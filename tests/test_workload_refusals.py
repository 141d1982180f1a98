"""Settings no trial could run are refused as the experiment loads or before any host change,
with what to do: a pgbench script that is no script, a jar that is no jar, more pgbench clients
than the open-file limit allows."""

from __future__ import annotations

import resource

import pytest

from hugelab.errors import ExperimentError
from hugelab.workloads.jvm import JvmBenchmark
from hugelab.workloads.postgres.pgbench import script_problem
from hugelab.workloads.postgres.workload import Postgres


def test_a_pgbench_script_must_be_text_with_a_statement(tmp_path):
    good = tmp_path / "good.sql"
    good.write_text("\\set aid random(1, 100000 * :scale)\n"
                    "SELECT abalance\n  FROM pgbench_accounts WHERE aid = :aid;\n")
    assert script_problem(str(good)) is None
    words = tmp_path / "words.txt"
    words.write_text("myhost\n")
    assert script_problem(str(words)) == "has no SQL statement (its first line: 'myhost')"
    binary = tmp_path / "x.bin"
    binary.write_bytes(b"\x7fELF\x02\x01\xff\xfe")
    assert script_problem(str(binary)) == "is not text (UTF-8)"
    (tmp_path / "empty.sql").write_text("\n \n")
    assert script_problem(str(tmp_path / "empty.sql")) == "is empty"
    assert script_problem(str(tmp_path / "missing.sql")) == "is not a file"
    with pytest.raises(ExperimentError, match="has no SQL statement") as exc:
        Postgres(script=str(words))
    assert "pgbench -f" in (exc.value.hint or "")


def test_a_jar_must_exist_and_be_a_zip(tmp_path):
    jar = tmp_path / "b.jar"
    jar.write_bytes(b"PK\x03\x04rest")
    JvmBenchmark(jar=str(jar), regex=r"(\d+)")
    for path, words in ((tmp_path / "none.jar", "does not exist"),
                        (tmp_path, "cannot be read"),
                        (tmp_path / "text.jar", "is not a jar")):
        if path.name == "text.jar":
            path.write_text("hello")
        with pytest.raises(ExperimentError, match=words):
            JvmBenchmark(jar=str(path), regex=r"(\d+)")


def test_more_pgbench_clients_than_open_files_is_refused_before_any_change(monkeypatch):
    monkeypatch.setattr(resource, "getrlimit", lambda what: (1024, 4096))
    Postgres(clients=1021, threads=2).preflight("4k")
    with pytest.raises(ExperimentError) as exc:
        Postgres(clients=100000, threads=2).preflight("4k")
    assert exc.value.message == ("postgres: clients = 100000 needs 100003 open files in "
                                 "pgbench; this host allows 1024 (ulimit -n; hard limit 4096)")
    assert exc.value.hint.startswith("lower clients to 1021 or raise the limit (ulimit -n 100003)")
