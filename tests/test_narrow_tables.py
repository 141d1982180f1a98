"""Tables of cells at 80 columns keep every `factor=level` whole: `hugelab show` squeezed its
evidence column to four characters beside 001's 45-character cell names (`veri`/`fied`), and
the dry run folded `host=4k,huge_pages=off` mid-word. A long cell name now shows its levels
one a line where the table would not fit (hugelab.cli.output.stacked)."""

from __future__ import annotations

from hugelab.cli.output import stacked
from tests import runstores
from tests.helpers import cell_words, check_layout, cli


def test_long_names_stack_their_levels_only_when_they_do_not_fit():
    names = ["host=never,qemu=hugetlbfs+prealloc,guest=always", "host=thp,qemu=anon,guest=never"]
    narrow = stacked(names, 80, 50)
    assert narrow[names[0]] == "host=never,\nqemu=hugetlbfs+prealloc,\nguest=always"
    assert stacked(names, 200, 50) == {n: n for n in names}
    assert stacked(["4k", "thp"], 40, 50) == {"4k": "4k", "thp": "thp"}  # short: as they are


def test_show_at_80_columns_splits_no_level(tmp_path, capsys, monkeypatch):
    exp = runstores.experiment("001-mnstory-factorial.toml")
    runstores.fabricate(tmp_path / "s.db", exp, blocks=2)
    monkeypatch.setenv("COLUMNS", "80")
    rc, out, err = cli(["show", "1", "--store", str(tmp_path / "s.db")], capsys)
    assert rc == 0, err
    check_layout(out, 80, cell_words(exp) | {lv + "," for lv in cell_words(exp)})
    assert "qemu=hugetlbfs+prealloc," in out
    assert "evidence" in out  # its column has room for a word (it read `evid` / `ence`)
