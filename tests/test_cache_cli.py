"""`hugelab cache list` / `cache clear`: every area's entries with their size on disk (checked
against du), an entry a live run holds left and said so, bad names refused before anything is
removed, and no removal without root. The areas are a scratch cache directory and a scratch
layers root: the host's own caches are only listed, never cleared, here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hugelab import owned
from hugelab.cli import cache
from hugelab.cli.main import main
from hugelab.vm.domains import layer
from tests.helpers import HUGELAB

pytestmark = pytest.mark.beside  # lock-free tests here run beside the machine lane (docs/testing.md)

HOLDER = """import sys
from pathlib import Path
from hugelab import owned
owned.TemplateCache(Path(sys.argv[1])).ensure(sys.argv[2], lambda tmp: tmp.mkdir(), hold=True)
print("held", flush=True)
sys.stdin.read()
"""


def _built(root: Path, key: str, size: int) -> Path:
    def build(tmp: Path) -> None:
        tmp.mkdir()
        (tmp / "data").write_bytes(b"\1" * size)
        (tmp / "sparse").write_bytes(b"")
        with open(tmp / "sparse", "r+b") as f:
            f.truncate(64 << 20)  # 64 MiB long, nothing allocated: du counts none of it
    return owned.TemplateCache(root).ensure(key, build)


@pytest.fixture
def areas(tmp_path, monkeypatch):
    monkeypatch.setenv("HUGELAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(layer, "LAYER_ROOT", tmp_path / "layers")
    pg = tmp_path / "cache" / "postgres"
    _built(pg, "aaaa", 3 << 20)
    _built(pg, "bbbb", 1 << 20)
    lay = _built(tmp_path / "layers", "cccc", 2 << 20)
    (lay / "layer.json").write_text(json.dumps({"what": "PostgreSQL's cluster filled by "
                                                "pgbench -i -s 1", "domain": "d"}))
    (tmp_path / "layers" / "dddd.tmp").mkdir()  # a killed build's half: not an entry
    return tmp_path


@pytest.mark.tools  # du, the reference for the sizes
def test_every_entry_listed_with_its_size_on_disk_as_du_counts_it(areas):
    rows = {f"{r['area']}/{r['key']}": r for r in cache.listing()}
    assert set(rows) == {"postgres/aaaa", "postgres/bbbb", "layers/cccc"}
    for r in rows.values():
        du = subprocess.run(["du", "-s", "-B1", r["path"]], capture_output=True, text=True,
                            check=True).stdout.split()[0]
        assert r["bytes"] == int(du), r  # the sparse 64 MiB file adds nothing, as in du
        assert r["busy"] is False
    assert rows["layers/cccc"]["what"] == "PostgreSQL's cluster filled by pgbench -i -s 1 in " \
        "domain d"
    assert rows["postgres/aaaa"]["what"] == "postgres's data templates, by what built them"


def test_clear_leaves_what_a_live_run_holds_and_removes_the_rest(areas, monkeypatch):
    pg = areas / "cache" / "postgres"
    run = subprocess.Popen([sys.executable, "-c", HOLDER, str(pg), "aaaa"],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert run.stdout is not None and run.stdout.readline() == "held\n"
        busy = {r["key"]: r["busy"] for r in cache.listing()}
        assert busy == {"aaaa": True, "bbbb": False, "cccc": False}
        said = cache.clear(["postgres"], False, dry_run=True)
        assert [(r["key"], r["outcome"]) for r in said] == [
            ("aaaa", "in use: would be left"), ("bbbb", "would be removed")]
        assert (pg / "bbbb").is_dir()  # a dry run removes nothing
        done = cache.clear(["postgres", "postgres/bbbb"], False, dry_run=False)
        assert [(r["key"], r["outcome"]) for r in done] == [
            ("aaaa", "in use by a live run: left"), ("bbbb", "removed")]
        assert (pg / "aaaa").is_dir() and not (pg / "bbbb").exists()
        assert (areas / "layers" / "cccc").is_dir()  # another area: not named
    finally:
        run.communicate("", timeout=30)
    cache.clear([], True, dry_run=False)
    assert cache.listing() == []
    assert (areas / "layers" / "dddd.tmp").is_dir()  # a half-built one is `recover`'s


def test_bad_names_are_refused_before_anything_goes(areas, capsys):
    assert main(["cache", "clear", "postgres/bbbb", "nope"]) == 2
    assert "no cache area 'nope'" in capsys.readouterr().err
    assert main(["cache", "clear", "postgres/bbbb", "postgres/zzzz"]) == 2
    assert "no entry 'zzzz' in cache area 'postgres'" in capsys.readouterr().err
    assert main(["cache", "clear"]) == 2
    assert "--all" in capsys.readouterr().err
    assert (areas / "cache" / "postgres" / "bbbb").is_dir()


def test_clear_needs_root_but_its_dry_run_does_not(areas, monkeypatch, capsys):
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert main(["cache", "clear", "postgres"]) != 0
    assert "needs root" in capsys.readouterr().err
    assert main(["cache", "clear", "postgres", "--dry-run"]) == 0
    assert "would free 4.0 MiB" in capsys.readouterr().out
    assert (areas / "cache" / "postgres" / "bbbb").is_dir()


def test_the_command_lists_this_hosts_caches_as_json(tmp_path):
    env = {"HUGELAB_CACHE_DIR": str(tmp_path / "empty"), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([*HUGELAB, "cache", "list", "--json"], capture_output=True, text=True,
                       env=env, check=False)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)  # the host's layers only: the cache directory is empty
    assert {row["area"] for row in out["entries"]} <= {"layers"}
    assert all(row["bytes"] > 0 and row["what"] for row in out["entries"])
    assert out["unreadable"] == []  # root


def test_a_user_who_cannot_read_an_area_is_told_so(areas, monkeypatch, capsys):
    """Not root: the cache directory's folders are root's (0700); the listing says which it
    could not read rather than "nothing cached"."""
    pg = areas / "cache" / "postgres"
    monkeypatch.setattr("os.access", lambda path, mode: Path(path) != pg)
    real = owned.TemplateCache.entries

    def entries(self):
        if self.root == pg:
            raise PermissionError(13, "Permission denied", str(pg))
        return real(self)
    monkeypatch.setattr(owned.TemplateCache, "entries", entries)
    assert main(["cache", "list"]) == 0
    out = capsys.readouterr().out
    assert f"{pg}: not readable by this user" in out and "postgres/" not in out
    assert "layers/cccc" in out
