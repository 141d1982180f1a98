"""`hugelab store info` names the store's engine as a user knows it (sqlite, postgresql), not
the class that implements it."""

from __future__ import annotations

import json

from tests.helpers import cli, make_store


def test_store_info_names_the_engine(tmp_path, capsys):
    db = tmp_path / "s.db"
    make_store(db, blocks=2)
    rc, out, err = cli(["store", "info", "--store", str(db), "--json"], capsys)
    assert rc == 0, err
    info = json.loads(out)
    assert info["engine"] == "sqlite" and info["runs"] == 1 and info["trials"] > 0
    rc, out, _ = cli(["store", "info", "--store", str(db)], capsys)
    assert rc == 0 and "engine: sqlite" in out
