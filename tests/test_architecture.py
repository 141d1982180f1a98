"""The import rules of docs/architecture.md, checked against the code: imports only point down,
peers of one layer do not import each other, and no files import each other in a circle.

A group is a package or module under hugelab/ (`vm`, `runner`), or a subpackage with a row of its
own (`vm.own`): a module belongs to the longest group its dotted path starts with."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "hugelab"
MAX_ROW = 120  # characters of a row's "what lives there"


def rows() -> list[tuple[int, str, str]]:
    """(layer, group, what lives there) for each row of the table in docs/architecture.md."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    found = re.findall(r"^\| (\d+) \| `([\w.]+)` \| (.*) \|$", text, re.MULTILINE)
    assert found, "docs/architecture.md has no layer table"
    return [(int(layer), group, what) for layer, group, what in found]


def layers() -> dict[str, int]:
    """group -> layer, from the table in docs/architecture.md."""
    return {group: layer for layer, group, _what in rows()}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def group_of(module: str, groups: Iterable[str] = ()) -> str:
    """The module's group: the longest of `groups` its path (after `hugelab.`) starts with,
    else its package or module right under hugelab/."""
    parts = module.split(".")[1:]
    for n in range(len(parts), 1, -1):
        if ".".join(parts[:n]) in groups:
            return ".".join(parts[:n])
    return parts[0] if parts else "hugelab"


def imports(path: Path, modules: set[str]) -> set[str]:
    """hugelab modules a file imports, anywhere in it (function-level imports too);
    `from hugelab.trial import monitors` names the module hugelab.trial.monitors."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "hugelab" or node.module.startswith("hugelab."):
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    out.add(sub if sub in modules else node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("hugelab.")}
    return out


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PKG.rglob("*.py")}
    return {mod: {d for d in imports(path, set(files)) if d in files and d != mod}
            for mod, path in files.items()}


def test_every_group_of_the_code_is_in_the_table():
    groups = {group_of(m, layers()) for m in graph()}
    assert groups == set(layers()), "docs/architecture.md must list exactly the groups there are"


def test_every_row_is_one_short_sentence():
    """A row says what lives in its group in one sentence; details go below the table."""
    long = [f"{group}: {what}" for _layer, group, what in rows()
            if len(what) > MAX_ROW or re.search(r"[.;!?] (?=\S)", what.split(": ", 1)[-1])
            or not what.endswith(".")]
    assert not long, "rows that are not one short sentence ending in a full stop:\n" + \
        "\n".join(long)


def upward(g: dict[str, set[str]], rank: dict[str, int]) -> list[str]:
    def of(m: str) -> str:
        return group_of(m, rank)
    return sorted(f"{mod} ({of(mod)}, layer {rank[of(mod)]}) imports {dep} "
                  f"({of(dep)}, layer {rank[of(dep)]})"
                  for mod, deps in g.items() for dep in deps
                  if of(dep) != of(mod) and rank[of(dep)] >= rank[of(mod)])


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}
    found: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(g.get(node, ())):
            if state.get(dep) == 1:
                found.append(path[path.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, [*path, dep])
        state[node] = 2

    for mod in sorted(g):
        if mod not in state:
            visit(mod, [mod])
    return found


def test_imports_only_point_down():
    bad = upward(graph(), layers())
    assert not bad, "imports that break docs/architecture.md:\n" + "\n".join(bad)


def test_no_import_circles():
    found = circles(graph())
    assert not found, "import circles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_the_checks_can_fail():
    """A made-up upward import, peer import and circle are caught by the same rules, between
    groups and between the subpackages of one package."""
    rank = layers()
    fake = {"hugelab.host.control": {"hugelab.cli.main"},      # up
            "hugelab.trial.native": {"hugelab.store.sqlite"},  # a peer of the same layer
            "hugelab.vm.own.guest": {"hugelab.vm.domains.ssh",  # a peer subpackage
                                     "hugelab.vm.trial",        # up, to its parent's modules
                                     "hugelab.vm.common.spec"},  # down: fine
            "hugelab.vm.common.spec": {"hugelab.vm.own.qemu_args"},  # up, within vm
            "hugelab.vm.a": {"hugelab.vm.b"}, "hugelab.vm.b": {"hugelab.vm.a"},
            "hugelab.vm.trial": {"hugelab.vm.own.guest", "hugelab.vm.domains.ssh"},  # fine
            "hugelab.cli.run": {"hugelab.store.sqlite"}}       # down: fine
    assert len(upward(fake, rank)) == 5
    assert circles(fake) == [["hugelab.vm.a", "hugelab.vm.b", "hugelab.vm.a"],
                             ["hugelab.vm.own.guest", "hugelab.vm.trial", "hugelab.vm.own.guest"]]


def test_a_module_belongs_to_its_longest_group():
    rank = layers()
    assert group_of("hugelab.vm.own.guest", rank) == "vm.own"
    assert group_of("hugelab.vm.trial", rank) == "vm"
    assert group_of("hugelab.report.runload", rank) == "report"
    assert group_of("hugelab", rank) == "hugelab"


def inside_the_groups() -> dict[str, str]:
    """group -> the text of its bullet under "Inside the groups" in docs/architecture.md."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Inside the groups", 1)[1].split("\n## ", 1)[0]
    bullets = re.findall(r"^- `([\w.]+)`: (.*?)(?=^- |^\S|\Z)", section, re.MULTILINE | re.DOTALL)
    assert bullets, "docs/architecture.md has no bullets under 'Inside the groups'"
    return {group: " ".join(what.split()) for group, what in bullets}


def undocumented_packages(packages: Iterable[str], bullets: dict[str, str]) -> list[str]:
    """Packages (`vm/own`, `report/fleet`) without a bullet of their own or a mention (`fleet/`)
    in the bullet of the package they are in."""
    missing = []
    for pkg in packages:
        parts = pkg.split("/")
        owner = next((".".join(parts[:n]) for n in range(len(parts), 0, -1)
                      if ".".join(parts[:n]) in bullets), None)
        rest = "/".join(parts[len(owner.split(".")):]) if owner else pkg
        if owner is None or (rest and f"`{rest}/`" not in bullets[owner]):
            missing.append(f"hugelab/{pkg}/")
    return missing


def test_every_package_has_its_bullet():
    """Every package under hugelab/ has a bullet under "Inside the groups" (`host`, `vm.own`),
    or is named (`fleet/`) in the bullet of the package it is in."""
    packages = sorted(str(p.parent.relative_to(PKG)) for p in PKG.rglob("__init__.py")
                      if p.parent != PKG)
    assert "report/fleet" in packages and "host" in packages
    missing = undocumented_packages(packages, inside_the_groups())
    assert not missing, "packages docs/architecture.md does not describe:\n" + "\n".join(missing)


def test_every_c_file_is_named():
    """Every C source in hugelab/csrc/ (read from the directory) is named in docs/architecture.md:
    `hugelab/csrc/NAME.c`, `csrc/NAME.c` or `NAME.c`."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    sources = sorted(p.name for p in (PKG / "csrc").glob("*.c"))
    assert sources, "no C sources in hugelab/csrc/"
    missing = [s for s in sources
               if not re.search(rf"`(?:hugelab/)?(?:csrc/)?{re.escape(s)}`", text)]
    assert not missing, "C files docs/architecture.md does not name: " + ", ".join(missing)


def test_the_doc_checks_can_fail():
    bullets = {"vm": "a guest trial", "vm.own": "the QEMU command line",
               "report": "one report across hosts (`fleet/`: ...)"}
    assert undocumented_packages(["vm", "vm/own", "report/fleet"], bullets) == []
    assert undocumented_packages(["host", "vm/domains", "report/other"], bullets) == \
        ["hugelab/host/", "hugelab/vm/domains/", "hugelab/report/other/"]
