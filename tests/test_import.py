"""`hugelab import` of CSV files: validation with line numbers, all-or-nothing, runs/trials."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from hugelab.errors import StoreError, UsageError
from hugelab.store import Store
from hugelab.store.importers import (
    MAX_REPORTED,
    ImportRejected,
    import_files,
    parse_csv,
    parse_fraction,
    split_inputs,
)
from tests.helpers import cli


def counts(db: Path) -> tuple[int, int]:
    con = sqlite3.connect(db)
    try:
        return (con.execute("SELECT COUNT(*) FROM runs").fetchone()[0],
                con.execute("SELECT COUNT(*) FROM trials").fetchone()[0])
    finally:
        con.close()


GOOD = """arm,value,block,order,timestamp,unit,better,note
4k,10.0,0,1,2024-05-01T10:00:00Z,s,lower,first
thp,9.0,0,0,1714557601,s,lower,
4k,10.5,1,0,,s,lower,
thp,9.4,1,1,,s,lower,
"""

BAD = """arm,value,block,unit
4k,10.0,0,s
thp,abc,0,s
4k,,1,s
thp,-3,1,s
,5,2,s
4k,5,x,s
4k,1e999,3,s
4k,6,0,s
thp,7,4,ms
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_bad_rows_are_all_reported_with_line_numbers_and_nothing_is_written(tmp_path):
    src = write(tmp_path, "bad.csv", BAD)
    db = tmp_path / "new.db"
    with pytest.raises(ImportRejected) as info:
        import_files(db, [(None, src)])
    lines = sorted(p.line for p in info.value.problems)
    assert lines == [3, 4, 5, 6, 7, 8, 9, 10]
    msg = info.value.message
    assert "8 bad row(s); nothing was imported" in msg
    assert f"{src}:3: value 'abc' is not a number" in msg
    assert f"{src}:4: value is empty" in msg
    assert "not positive" in msg and "arm is empty" in msg and "'x' is not an integer" in msg
    assert "not finite" in msg
    assert f"{src}:9: block 0 of arm '4k' was already given at {src}:2" in msg
    assert f"{src}:10: unit 'ms' differs from 's'" in msg
    assert not db.exists(), "a failed import must not even create the store"


def test_bad_rows_leave_an_existing_store_untouched(tmp_path):
    db = tmp_path / "s.db"
    import_files(db, [(None, write(tmp_path, "good.csv", GOOD))])
    before = counts(db)
    with pytest.raises(ImportRejected):
        import_files(db, [(None, write(tmp_path, "bad.csv", BAD))])
    assert counts(db) == before == (1, 4)


def test_many_bad_rows_are_capped_but_counted(tmp_path):
    rows = "arm,value\n" + "".join(f"a,bad{i}\n" for i in range(MAX_REPORTED + 7))
    with pytest.raises(ImportRejected) as info:
        import_files(tmp_path / "s.db", [(None, write(tmp_path, "many.csv", rows))])
    assert info.value.total == MAX_REPORTED + 7
    assert "... and 7 more" in info.value.message
    assert len(info.value.problems) == MAX_REPORTED


def test_good_csv_becomes_one_run_with_trials(tmp_path):
    db = tmp_path / "s.db"
    src = write(tmp_path, "good.csv", GOOD)
    res = import_files(db, [(None, src)], name="laptop")
    assert (res.trials, res.arms, res.blocks, res.baseline) == (4, {"4k": 2, "thp": 2}, 2, "4k")
    assert res.pairing == "block" and not res.notes
    with Store(db) as store:
        run = store.run(res.run_id)
        assert run["name"] == "laptop" and run["status"] == "finished"
        exp = run["experiment"]
        assert exp["imported"] is True and exp["baseline"] == "4k"
        assert [a["name"] for a in exp["arms"]] == ["4k", "thp"]
        assert exp["source"][0]["path"] == str(src.resolve()) and exp["source"][0]["format"] == "csv"
        assert len(exp["source"][0]["sha256"]) == 64
        trials = list(store.trials(res.run_id))
        values = store.values(res.run_id)
    assert values == [(0, 0, "thp", "native", "ok", 9.0), (0, 1, "4k", "native", "ok", 10.0),
                      (1, 0, "4k", "native", "ok", 10.5), (1, 1, "thp", "native", "ok", 9.4)]
    first = next(t for t in trials if t["arm"] == "4k" and t["block"] == 0)
    assert first["provenance"]["accel"] == "unknown"
    assert first["provenance"]["imported"] is True
    assert first["provenance"]["source"] == f"{src}:2"
    assert first["provenance"]["note"] == "first"
    assert first["started"] == pytest.approx(1714557600.0)
    assert (first["unit"], first["better"]) == ("s", "lower")


def test_csv_without_blocks_pairs_by_file_order_and_says_so(tmp_path):
    src = write(tmp_path, "noblock.csv", "Arm;Value\na;1\nb;2\na;3\nb;4\nb;5\n")
    res = import_files(tmp_path / "s.db", [(None, src)], baseline="b")
    assert res.pairing == "order" and res.baseline == "b"
    assert any("i-th trial of each arm" in n for n in res.notes)
    assert any("different numbers of trials" in w for w in res.warnings)
    with Store(tmp_path / "s.db") as store:
        vals = [(b, a, v) for b, _p, a, _t, _s, v in store.values(res.run_id)]
    assert sorted(vals) == [(0, "a", 1.0), (0, "b", 2.0), (1, "a", 3.0), (1, "b", 4.0),
                            (2, "b", 5.0)]


def test_header_problems(tmp_path):
    with pytest.raises(ImportRejected, match="lacks column.*value"):
        import_files(tmp_path / "s.db", [(None, write(tmp_path, "h.csv", "arm,val\na,1\n"))])
    with pytest.raises(ImportRejected, match="empty file"):
        import_files(tmp_path / "s.db", [(None, write(tmp_path, "e.csv", ""))])
    p = parse_csv("value\n1\n2\n", "x.csv", arm="solo")
    assert [r.arm for r in p.records] == ["solo", "solo"] and not p.problems
    p = parse_csv("arm,value\na,1,extra\n", "x.csv")
    assert p.problems[0].line == 2 and "more cells" in p.problems[0].message


def test_same_files_imported_twice_is_refused(tmp_path):
    db = tmp_path / "s.db"
    src = write(tmp_path, "good.csv", GOOD)
    import_files(db, [(None, src)])
    with pytest.raises(StoreError, match="already imported"):
        import_files(db, [(None, src)])
    assert counts(db) == (1, 4)


def test_split_inputs_and_percentages(tmp_path):
    f = write(tmp_path, "x=y.txt", "")
    assert split_inputs(["thp=a.txt", str(f), "b.txt"], "4k") == [
        ("thp", Path("a.txt")), ("4k", f), ("4k", Path("b.txt"))]
    with pytest.raises(UsageError):
        split_inputs(["bad arm!=a.txt"], None)
    assert parse_fraction("1%", "e") == pytest.approx(0.01)
    assert parse_fraction("0.01", "e") == pytest.approx(0.01)
    assert parse_fraction("99.99%", "c") == pytest.approx(0.9999)
    for bad in ("99.99", "1", "x", "-1%", "0", "nan"):
        with pytest.raises(UsageError):
            parse_fraction(bad, "c")


def test_cli_import_csv_text_and_json(tmp_path, capsys):
    db = tmp_path / "s.db"
    src = write(tmp_path, "noblock.csv", "arm,value\na,1\nb,2\na,3\nb,4\n")
    rc, out, err = cli(["import", str(src), "--store", str(db), "--name", "n1"], capsys)
    assert rc == 0, err
    assert "imported 4 trial(s) into run 1" in out and "i-th trial of each arm" in out
    src2 = write(tmp_path, "two.csv", "arm,value,block\na,1,0\nb,2,0\n")
    rc, out, err = cli(["import", str(src2), "--store", str(db), "--json"], capsys)
    assert rc == 0, err
    data = json.loads(out)
    assert data["run"] == 2 and data["arms"] == {"a": 1, "b": 1} and data["pairing"] == "block"


def test_cli_import_bad_rows_exit_2_with_lines(tmp_path, capsys):
    db = tmp_path / "s.db"
    src = write(tmp_path, "bad.csv", BAD)
    rc, out, err = cli(["import", str(src), "--store", str(db)], capsys)
    assert rc == 2 and out == ""
    assert f"{src}:3:" in err and f"{src}:10:" in err and "Traceback" not in err
    assert not db.exists()


def test_cli_import_unknown_format_and_missing_arm(tmp_path, capsys):
    db = tmp_path / "s.db"
    junk = write(tmp_path, "junk.txt", "hello\n")
    rc, _, err = cli(["import", str(junk), "--store", str(db)], capsys)
    assert rc == 2 and "cannot tell the format" in err and "--format" in err
    sb = write(tmp_path, "sb.txt", "Total operations: 5 (1.0 per second)\n")
    rc, _, err = cli(["import", str(sb), "--store", str(db)], capsys)
    assert rc == 2 and "which arm" in err
    rc, _, err = cli(["import", str(tmp_path / "nope.csv"), "--store", str(db)], capsys)
    assert rc == 2 and "cannot read" in err
    assert not db.exists()


def test_blocks_numbered_from_one_count_as_many_as_there_are(tmp_path):
    rows = "arm,value,block\n" + "".join(f"{a},{v},{b}\n" for b in range(1, 13)
                                          for a, v in (("4k", 10.0), ("thp", 9.0)))
    res = import_files(tmp_path / "s.db", [(None, write(tmp_path, "one.csv", rows))])
    assert res.blocks == 12  # not 13: the numbers are labels, counted as given
    with Store(tmp_path / "s.db") as store:
        assert store.run(res.run_id)["experiment"]["blocks"] == 12
