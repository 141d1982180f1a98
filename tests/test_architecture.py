"""The import rules of docs/architecture.md, checked against the code: imports only point down,
peers of one layer do not import each other, and no files import each other in a circle."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "hugelab"


def layers() -> dict[str, int]:
    """group -> layer, from the table in docs/architecture.md."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    rows = re.findall(r"^\| (\d+) \| `([\w]+)` \|", text, re.MULTILINE)
    assert rows, "docs/architecture.md has no layer table"
    return {group: int(layer) for layer, group in rows}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def group_of(module: str) -> str:
    parts = module.split(".")
    return "hugelab" if len(parts) == 1 else parts[1]


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
    groups = {group_of(m) for m in graph()}
    assert groups == set(layers()), "docs/architecture.md must list exactly the groups there are"


def upward(g: dict[str, set[str]], rank: dict[str, int]) -> list[str]:
    return sorted(f"{mod} ({group_of(mod)}, layer {rank[group_of(mod)]}) imports {dep} "
                  f"({group_of(dep)}, layer {rank[group_of(dep)]})"
                  for mod, deps in g.items() for dep in deps
                  if group_of(dep) != group_of(mod) and rank[group_of(dep)] >= rank[group_of(mod)])


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
    """A made-up upward import, peer import and circle are caught by the same rules."""
    rank = layers()
    fake = {"hugelab.host.control": {"hugelab.cli.main"},      # up
            "hugelab.trial.native": {"hugelab.store.sqlite"},  # a peer of the same layer
            "hugelab.vm.a": {"hugelab.vm.b"}, "hugelab.vm.b": {"hugelab.vm.a"},
            "hugelab.cli.run": {"hugelab.store.sqlite"}}       # down: fine
    assert len(upward(fake, rank)) == 2
    assert circles(fake) == [["hugelab.vm.a", "hugelab.vm.b", "hugelab.vm.a"]]
