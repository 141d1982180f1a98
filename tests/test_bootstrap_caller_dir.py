"""`bootstrap run` and `bootstrap hugelab` work in the caller's directory, as a user running the
script from elsewhere expects: an experiment file named relative to where they stand is found,
and ./hugelab.db is theirs (the script itself works in the checkout: its venv, its sources)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.tools]


def test_a_relative_experiment_file_is_the_callers(tmp_path: Path) -> None:
    shutil.copy(ROOT / "examples" / "redis-thp.toml", tmp_path / "mine.toml")
    r = subprocess.run([str(ROOT / "bootstrap"), "hugelab", "run", "mine.toml", "--dry-run"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr  # before: "cannot read mine.toml"
    assert "estimated duration" in r.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.toml"]  # a dry run writes nothing
