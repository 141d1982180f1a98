"""The pages agree with the code where a new user reads them: every workload kind the registry
knows has its row in docs/experiments.md (where the parser's hint for a missing kind points),
the demo domain has one name everywhere (`hugelab vm demo-domain`'s default), and the pages on
a user's VM name every dump format the code restores there."""

from __future__ import annotations

import re
from pathlib import Path

from hugelab.cli.examples import EXAMPLES
from hugelab.cli.main import build_parser
from hugelab.workloads.postgres.userdata import check_user_data, dump_format
from hugelab.workloads.registry import kinds

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def section(page: str, title: str) -> str:
    """The text of a page's section, from its heading to the next heading of its level."""
    text = (DOCS / page).read_text()
    level = title.split(" ", 1)[0]
    start = text.index(title + "\n")
    nxt = re.search(rf"^{level} ", text[start + len(title):], re.M)
    return text[start: start + len(title) + (nxt.start() if nxt else len(text))]


def test_every_kind_has_its_row_on_the_experiments_page():
    rows = re.findall(r"^- `([a-z0-9-]+)`", section("experiments.md", "## Workload kinds"),
                      re.M)
    assert sorted(rows) == sorted(kinds()), "docs/experiments.md 'Workload kinds' is not the " \
        "registry's list of kinds"
    assert f"All {len(kinds())} kinds" in section("experiments.md", "## Workload kinds")


def test_the_demo_domain_has_one_name_everywhere():
    name = build_parser().parse_args(["vm", "demo-domain"]).name
    files = [*DOCS.glob("*.md"), ROOT / "README.md", *(ROOT / "examples").glob("*.toml")]
    said = {(f.name, m) for f in files for m in re.findall(r"hugelab-demo[\w-]*", f.read_text())}
    said |= {("cli/examples.py", m) for line, _ in EXAMPLES.values()
             for m in re.findall(r"hugelab-demo[\w-]*", line)}
    assert said and {m for _, m in said} == {name}, sorted(x for x in said if x[1] != name)


def test_the_pages_on_a_users_vm_name_every_dump_format_restored_there(tmp_path):
    tar = bytearray(512)
    tar[257:262] = b"ustar"
    formats = {dump_format(b"PGDMP\x01"): "-Fc", dump_format(bytes(tar)): "-Ft",
               dump_format(b"--\n-- PostgreSQL database dump\n"): "plain SQL"}
    assert set(formats) == {"custom", "tar", "plain"}

    for name, head in (("c.dump", b"PGDMP\x01"), ("t.tar", bytes(tar)), ("p.sql", b"--\n")):
        (tmp_path / name).write_bytes(head)

        class Dumped:  # a domain arm's postgres workload with a dump: taken, not refused
            dump, datadir, conf, script, builtin = str(tmp_path / name), None, None, "x", "x"
            domain_arm = True
        check_user_data(Dumped())
    for page, title in (("applications.md", "### In your own VM"),
                        ("vms.md", "### Servers in your own VMs")):
        text = " ".join(section(page, title).split())
        assert "plain-SQL `dump`" not in text, f"{page}: says plain SQL only"
        for said in formats.values():
            assert said in text, f"{page} '{title}' does not name {said}"
