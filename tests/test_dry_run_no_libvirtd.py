"""The whole dry run of every example with a user's domain while libvirtd is not reachable
(issue 40 item 1): it exits 0, shows every cell and says what it could not check. Before,
the domain's unread memory (0 MiB) failed the guest shape check and the dry run stopped with
"guest memory 0 MiB is too small"."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hugelab.cli.main import main
from hugelab.planning import domains
from hugelab.vm.common.libvirtd import DomainError

EXAMPLES = sorted(p for p in (Path(__file__).resolve().parents[1] / "examples").glob("*.toml")
                  if re.search(r'^domain = "', p.read_text(), re.MULTILINE))


def test_there_are_domain_examples():
    assert len(EXAMPLES) >= 4


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_dry_run_without_libvirtd_shows_every_cell(path, tmp_path, monkeypatch, capsys):
    def down(uri: str) -> None:
        raise DomainError(f"cannot connect to libvirt at {uri}: Connection refused")
    monkeypatch.setattr(domains, "connect", down)
    rc = main(["run", str(path), "--dry-run", "--json", "--store", str(tmp_path / "s.db")])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["warnings"][0].startswith("cannot connect to libvirt at ")
    assert "the host pool its RAM needs" in out["warnings"][0]
    domain_cells = [c for c in out["cells"] if "(the domain's RAM)" in c["guests"]]
    assert domain_cells and all(c["trial_s"] for c in domain_cells)
    assert not (tmp_path / "s.db").exists()  # the dry run opens no store
