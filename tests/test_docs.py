"""Docs that check themselves: the CLI reference is generated and every command is in it; the
README is a short front door whose links reach one page per task in docs/, and every link,
example and experiment snippet there holds."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from hugelab.cli import doc as clidoc

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
README_MAX_LINES = 220
ROW_MAX = 200
WIDE_TABLES_ALLOWED = {"benchmarks.md", "cli.md"}  # measurements and generated reference
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """`text` without its fenced code blocks (a `# comment` in a block is no heading)."""
    return re.sub(r"^```.*?^```[^\n]*$", "", text, flags=re.DOTALL | re.MULTILINE)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(m) for m in re.findall(r"^#{1,6} (.+)$", prose(page.read_text()), re.MULTILINE)}


def links(page: Path) -> list[tuple[Path, str]]:
    """(target file, anchor) of every relative link on `page`, outside code."""
    text = re.sub(r"`[^`\n]*`", "", prose(page.read_text()))
    out = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        out.append(((page.parent / path).resolve() if path else page, anchor))
    return out


def test_cli_reference_is_up_to_date():
    assert (ROOT / "docs" / "cli.md").read_text() == clidoc.render(), (
        "docs/cli.md is stale: run `.venv/bin/python -m hugelab.cli.doc > docs/cli.md`")


def test_every_command_is_documented_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    for name in clidoc.commands()[1:]:
        assert f"`{name}" in readme, f"README does not mention `{name}`"


def test_readme_starts_with_the_two_setup_commands():
    readme = README.read_text()
    assert readme.split("```", 1)[1].startswith("sh\n"), "the README's first code block is not the setup"
    block = readme.split("```sh", 1)[1].split("```", 1)[0].strip().splitlines()
    assert [line.split("#")[0].strip() for line in block] == ["./bootstrap run", "./bootstrap test"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "./bootstrap test" in ci


def test_readme_is_a_front_door():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move detail to docs/")


def test_every_link_resolves():
    broken = []
    for page in PAGES:
        for target, anchor in links(page):
            where = f"{page.relative_to(ROOT)} -> {target.relative_to(ROOT)}#{anchor}"
            if not target.exists():
                broken.append(f"{where}: no such file")
            elif anchor and target.suffix == ".md" and anchor not in anchors(target):
                broken.append(f"{where}: no such heading")
    assert not broken, "\n".join(broken)


def test_every_docs_page_is_reachable_from_the_readme():
    seen, todo = {README}, [README]
    while todo:
        for target, _ in links(todo.pop()):
            if target.suffix == ".md" and target.exists() and target not in seen:
                seen.add(target)
                todo.append(target)
    assert not [p.name for p in DOCS if p not in seen], "docs pages no link from README reaches"


def test_every_example_is_linked_from_the_page_that_explains_it():
    linked = {target for page in PAGES for target, _ in links(page)}
    examples = sorted((ROOT / "examples").glob("*.toml"))
    assert examples
    unlinked = [e.name for e in examples if e.resolve() not in linked]
    assert not unlinked, f"examples no docs page links: {unlinked}"


def test_no_table_row_is_too_wide_to_read():
    wide = []
    for page in PAGES:
        if page.name in WIDE_TABLES_ALLOWED and page.parent.name == "docs":
            continue
        for line in prose(page.read_text()).splitlines():
            if line.startswith("|") and len(line) > ROW_MAX:
                wide.append(f"{page.relative_to(ROOT)}: a {len(line)}-character row: {line[:60]}")
    assert not wide, "reflow these rows into lists:\n" + "\n".join(wide)


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


def test_every_toml_snippet_in_the_docs_parses():
    import tomllib

    from hugelab.experiment import parse_experiment

    blocks = [(page.name, block) for page in PAGES
              for block in re.findall(r"```toml\n(.*?)```", page.read_text(), re.DOTALL)]
    assert len({name for name, _ in blocks}) >= 3, "the docs show too few experiment files"
    for name, block in blocks:
        exp = parse_experiment(tomllib.loads(block), block)
        assert exp.arms, name
