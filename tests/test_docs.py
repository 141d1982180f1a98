"""Docs that check themselves: the CLI reference is generated and every command is in it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hugelab.cli import doc as clidoc

ROOT = Path(__file__).resolve().parents[1]


def test_cli_reference_is_up_to_date():
    assert (ROOT / "docs" / "cli.md").read_text() == clidoc.render(), (
        "docs/cli.md is stale: run `.venv/bin/python -m hugelab.cli.doc > docs/cli.md`")


def test_every_command_is_documented_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    for name in clidoc.commands()[1:]:
        assert f"`{name}" in readme, f"README does not mention `{name}`"


def test_readme_starts_with_the_two_setup_commands():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```sh", 1)[1].split("```", 1)[0].strip().splitlines()
    assert [line.split("#")[0].strip() for line in block] == ["./bootstrap run", "./bootstrap test"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "./bootstrap test" in ci


def test_every_command_has_help_that_exits_zero():
    """In this process (a subprocess per command cost 30 s); `hugelab --help` itself, the one
    a user types first, as a subprocess."""
    import contextlib
    import io

    from hugelab.cli.main import main

    for name in clidoc.commands():
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
            main([*name.split()[1:], "--help"])
        assert done.value.code in (0, None) and "usage:" in out.getvalue(), name
    r = subprocess.run([sys.executable, "-m", "hugelab.cli", "--help"], capture_output=True,
                       text=True)
    assert r.returncode == 0 and "usage:" in r.stdout


def test_every_toml_example_in_the_readme_parses():
    import re
    import tomllib

    from hugelab.experiment import parse_experiment

    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```toml\n(.*?)```", text, re.DOTALL)
    assert blocks, "the README shows no experiment file"
    for block in blocks:
        exp = parse_experiment(tomllib.loads(block), block)
        assert exp.arms
