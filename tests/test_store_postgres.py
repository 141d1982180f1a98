"""The PostgreSQL store against a real server (tests/pg_server.py): the same schema and named
migrations as SQLite, the same answers from the same trials, copies both ways without
duplicates, TLS when offered, and no password anywhere it could leak."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import pytest

from hugelab.errors import StoreError, UsageError
from hugelab.report.analysis import Options, analyse
from hugelab.report.runload import load_run
from hugelab.store import MIGRATIONS, Store, Trial
from hugelab.store.locate import display, open_store
from hugelab.store.postgres import PostgresStore
from tests.helpers import HUGELAB, make_store

pytestmark = [pytest.mark.server, pytest.mark.beside]  # PostgreSQL servers



def _cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HUGELAB, *argv], capture_output=True, text=True, env=env)


def test_display_drops_passwords() -> None:
    assert display("postgresql://u:s3cret@db.example:5432/h") == "postgresql://u@db.example:5432/h"
    assert display("postgres://u@h/d?password=s3cret&sslmode=require") == \
        "postgres://u@h/d?sslmode=require"
    assert display("runs/h.db") == "runs/h.db"


def test_same_tables_columns_and_migrations_as_sqlite(pg_url: str, tmp_path: Path) -> None:
    with open_store(pg_url) as pg, Store(tmp_path / "s.db") as lite:
        assert isinstance(pg, PostgresStore)
        assert pg.migrations() == lite.migrations() == sorted(n for n, _ in MIGRATIONS)
        for table in ("runs", "trials"):
            pg_cols = [r[0] for r in pg.tuples(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                "ORDER BY ordinal_position", (table,))]
            lite_cols = [r[1] for r in lite.tuples(f"PRAGMA table_info({table})")]
            assert pg_cols == lite_cols
        # REAL in SQLite is 8 bytes; PostgreSQL's REAL is 4: the translation keeps every digit
        kinds = dict(pg.tuples("SELECT column_name, data_type FROM information_schema.columns "
                               "WHERE table_name = 'trials'"))
        assert kinds["value"] == "double precision" and kinds["id"] == "bigint"
        assert pg.tls, "the server offers TLS: the connection must use it"


def test_same_report_from_the_same_trials(pg_url: str, tmp_path: Path) -> None:
    make_store(tmp_path / "s.db", arms={"4k": 1.0, "thp": 0.95}, flagged={"thp": {3}},
               failed={"4k": {5}})
    r = _cli("store", "copy", str(tmp_path / "s.db"), pg_url, "--json")
    assert r.returncode == 0, r.stderr
    copied = json.loads(r.stdout)["runs"]
    assert [(c["new_run"], c["present"]) for c in copied] == [(True, 0)]
    with Store(tmp_path / "s.db") as lite, open_store(pg_url) as pg:
        a = analyse(load_run(lite, 1), Options()).json()
        b = analyse(load_run(pg, copied[0]["dest_run"]), Options()).json()
        assert list(lite.values(1)) == list(pg.values(copied[0]["dest_run"]))
    for key in ("comparisons", "evidence", "classic"):
        assert json.dumps(a.get(key), sort_keys=True) == json.dumps(b.get(key), sort_keys=True)
    # the same command again copies nothing; back into a new SQLite file gives the same values
    again = json.loads(_cli("store", "copy", str(tmp_path / "s.db"), pg_url, "--json").stdout)
    assert [(c["new_run"], c["trials"]) for c in again["runs"]] == [(False, 0)]
    back = _cli("store", "copy", pg_url, str(tmp_path / "back.db"), "--json")
    assert back.returncode == 0, back.stderr
    with Store(tmp_path / "back.db") as b2, Store(tmp_path / "s.db") as lite:
        assert b2.values(1) == lite.values(1)
        assert [t["attempts"] for t in b2.trials(1)] == [t["attempts"] for t in lite.trials(1)]


def test_one_metric_of_every_ok_trial_reads_the_same(pg_url: str, tmp_path: Path) -> None:
    """trial_metric (the SEs a weighted look reads): numbers only, ok trials only, the same
    from SQLite and PostgreSQL."""
    run = make_store(tmp_path / "m.db", blocks=6, failed={"thp": {2}})
    with Store(tmp_path / "m.db") as lite, lite.transaction():
        lite.execute("UPDATE trials SET metrics = json_object('window_hl_se_log', 0.001 * "
                     "(block + 1)) WHERE block < 4")
        lite.execute("UPDATE trials SET metrics = json_object('window_hl_se_log', 'n/a') "
                     "WHERE block = 4")
        want = {(b, a): 0.001 * (b + 1) for b in range(4) for a in ("4k", "thp")
                if (b, a) != (2, "thp")}
    with Store(tmp_path / "m.db") as lite:
        assert lite.trial_metric(run, "window_hl_se_log") == pytest.approx(want)
    r = _cli("store", "copy", str(tmp_path / "m.db"), pg_url, "--json")
    assert r.returncode == 0, r.stderr
    dest = json.loads(r.stdout)["runs"][0]["dest_run"]
    with open_store(pg_url) as pg:
        assert pg.trial_metric(dest, "window_hl_se_log") == pytest.approx(want)


def test_resume_retry_and_json_paths_work_the_same(pg_url: str) -> None:
    with open_store(pg_url) as pg:
        run_id, new = pg.get_or_create_run("k@hostA", "e", {"name": "e"}, {"cpu": "x"}, "hostA")
        assert new and pg.get_or_create_run("k@hostA", "e", {}, {})[0] == run_id
        reps = {"n": 2, "values": [1.0, 2.0], "wall_s": [0.5, 0.5]}
        pg.add_trial(Trial(run_id, 0, 0, "4k", "failed", None, error="boom",
                           cause="environment"))
        assert pg.done_keys(run_id) == set()
        pg.add_trial(Trial(run_id, 0, 0, "4k", "ok", 1.5, provenance={
            "reps": reps, "boot_s": 2.5, "workload_s": 1.0, "accel": "tcg"}))
        assert pg.done_keys(run_id) == {(0, "4k", "native")}
        (t,) = list(pg.trials(run_id))
        assert t["attempts"] == 2 and t["provenance"]["earlier_attempts"][0]["error"] == "boom"
        (row,) = pg.rep_rows(run_id)
        assert row[3] == [1.0, 2.0] and row[5] == 2.5 and row[6] == 1.0
        run = pg.run(run_id)
        assert run["label"] == "hostA" and run["host"] == {"cpu": "x"} and run["trials"] == 1
        data = load_run(pg, run_id)
        assert data.accel == {"native": ["tcg"]}


def test_hosts_that_start_together_migrate_once(pg_server, monkeypatch) -> None:
    monkeypatch.setenv("PGPASSWORD", pg_server.password)
    url = pg_server.new_database()
    errors: list[BaseException] = []

    def open_one() -> None:
        try:
            open_store(url).close()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    with open_store(url) as pg:
        assert pg.tuples("SELECT COUNT(*) FROM migrations")[0][0] == len(MIGRATIONS)


def test_passwords_are_never_shown_or_stored(pg_server, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PGPASSWORD", pg_server.password)
    url = pg_server.new_database()
    monkeypatch.delenv("PGPASSWORD")
    with_password = url.replace("hugelab@", f"hugelab:{pg_server.password}@")
    make_store(tmp_path / "s.db")
    for argv in (["store", "copy", str(tmp_path / "s.db"), with_password],
                 ["store", "info", "--store", with_password, "--json"],
                 ["show", "--store", with_password, "--json"],
                 ["report", "--store", with_password, "--json"]):
        r = _cli(*argv)
        assert r.returncode == 0, (argv, r.stderr)
        assert pg_server.password not in r.stdout + r.stderr
        assert "hugelab@127.0.0.1" in r.stdout + r.stderr or argv[0] == "show"
        if argv[1] == "info":
            assert json.loads(r.stdout)["engine"] == "postgresql"
    bad = _cli("show", "--store", url.replace("hugelab@", "hugelab:wrong-Pw9@"))
    assert bad.returncode != 0 and "wrong-Pw9" not in bad.stdout + bad.stderr
    assert "hint" in bad.stderr and "Traceback" not in bad.stderr
    monkeypatch.setenv("PGPASSWORD", pg_server.password)
    with open_store(url) as pg:
        dump = json.dumps([pg.runs(), [list(pg.trials(r["id"])) for r in pg.runs()]])
    assert pg_server.password not in dump


def test_hugelab_store_names_the_store_by_environment(pg_url: str, tmp_path: Path,
                                                      monkeypatch) -> None:
    make_store(tmp_path / "s.db")
    assert _cli("store", "copy", str(tmp_path / "s.db"), pg_url).returncode == 0
    monkeypatch.setenv("HUGELAB_STORE", pg_url)
    r = _cli("show", "--json")
    assert r.returncode == 0, r.stderr
    assert [run["name"] for run in json.loads(r.stdout)] == ["exp"]


def test_unreachable_server_is_a_clear_error() -> None:
    with pytest.raises(StoreError, match="cannot connect to store postgresql://nobody@127.0.0.1:1/x"):
        open_store("postgresql://nobody:pw@127.0.0.1:1/x")
    r = _cli("show", "--store", "mysql://x@127.0.0.1/db")
    assert r.returncode != 0 and "unknown store URL" in r.stderr


EXP = """
name = "pg-e2e"
seed = 5
blocks = 2
baseline = "4k"
[workload]
kind = "hugelab-mem"
size = "16M"
duration = 0.1
[[arms]]
name = "4k"
backing = "4k"
[[arms]]
name = "thp"
backing = "thp"
"""


@pytest.mark.host
def test_hosts_write_their_own_runs_into_one_postgresql(pg_url: str, tmp_path: Path) -> None:
    """`hugelab run --store URL --label HOST`: each label its own run, trials committed one by
    one; the same label again resumes (no duplicate), `hugelab show` lists both."""
    exp = tmp_path / "e.toml"
    exp.write_text(EXP)
    for label in ("alpha", "beta", "alpha"):
        r = _cli("run", str(exp), "--store", pg_url, "--label", label, "--json")
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["store"] == display(pg_url) and out["executed"] == (0 if out["resumed"] else 4)
    runs = json.loads(_cli("show", "--store", pg_url, "--json").stdout)
    assert sorted((r["label"], r["trials"], r["status"]) for r in runs) == [
        ("alpha", 4, "finished"), ("beta", 4, "finished")]
    bad = _cli("run", str(exp), "--store", pg_url, "--label", "a\nb")
    assert bad.returncode == 2 and "--label" in bad.stderr


def test_a_password_in_a_malformed_url_is_never_quoted() -> None:
    for url in ("postgresql://bob:s3cr%zzet@127.0.0.1:1/x", "postgresql://bob:s3cret@[::1]x/x",
                "postgresql://bob@127.0.0.1:1/x?password=s3cret&connect_timeout=1"):
        with pytest.raises((StoreError, UsageError)) as err:
            open_store(url)
        shown = f"{err.value.message} {err.value.hint}"
        assert "s3cr" not in shown and "s3cret" not in shown, shown


def test_a_password_in_the_query_is_used_and_hidden(pg_server, monkeypatch) -> None:
    monkeypatch.setenv("PGPASSWORD", pg_server.password)
    url = pg_server.new_database()
    monkeypatch.delenv("PGPASSWORD")
    with open_store(f"{url}?password={pg_server.password}") as pg:
        assert pg.name == url and pg.tls


def test_nul_in_a_workloads_output_is_stored_the_same_by_both(pg_url: str,
                                                             tmp_path: Path) -> None:
    for store in (open_store(pg_url), Store(tmp_path / "s.db")):
        with store:
            run_id, _ = store.get_or_create_run("k", "e", {}, {})
            store.add_trial(Trial(run_id, 0, 0, "4k", "failed", None, error="bad\x00byte",
                                  evidence={"stderr": "x\x00y"}, cause="workload"))
            (t,) = list(store.trials(run_id))
            assert t["error"] == "bad\ufffdbyte" and t["evidence"]["stderr"] == "x\ufffdy"
            assert load_run(store, run_id).details[0].error_reasons


def test_a_role_that_may_only_read_can_report(pg_server, pg_url: str, tmp_path: Path,
                                              monkeypatch) -> None:
    import psycopg
    make_store(tmp_path / "s.db")
    assert _cli("store", "copy", str(tmp_path / "s.db"), pg_url).returncode == 0
    db = pg_url.rsplit("/", 1)[1]
    with psycopg.connect(pg_url, password=pg_server.password, autocommit=True) as c:
        c.execute("DROP ROLE IF EXISTS reader")
        c.execute("CREATE ROLE reader LOGIN PASSWORD 'reader-pw'")
        c.execute(f'GRANT CONNECT ON DATABASE "{db}" TO reader')
        c.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader")
    monkeypatch.setenv("PGPASSWORD", "reader-pw")
    r = _cli("report", "--store", pg_url.replace("hugelab@", "reader@"), "--json")
    assert r.returncode == 0, r.stderr


def test_copying_a_resumed_run_again_brings_its_retries_and_status(pg_url: str,
                                                                  tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as lite:
        run_id, _ = lite.get_or_create_run("k@a", "e", {}, {}, "a")
        lite.add_trial(Trial(run_id, 0, 0, "4k", "failed", None, error="killed",
                             cause="environment"))
    assert _cli("store", "copy", str(tmp_path / "s.db"), pg_url).returncode == 0
    with Store(tmp_path / "s.db") as lite:  # resumed: the retry succeeds, the run finishes
        lite.add_trial(Trial(run_id, 0, 0, "4k", "ok", 1.0))
        lite.add_trial(Trial(run_id, 1, 0, "4k", "ok", 2.0))
        lite.set_run_status(run_id, "finished")
    again = json.loads(_cli("store", "copy", str(tmp_path / "s.db"), pg_url, "--json").stdout)
    assert [(c["trials"], c["present"]) for c in again["runs"]] == [(2, 0)]
    with open_store(pg_url) as pg:
        (run,) = pg.runs()
        trials = list(pg.trials(run["id"]))
    assert run["status"] == "finished" and [t["status"] for t in trials] == ["ok", "ok"]
    assert trials[0]["attempts"] == 2
