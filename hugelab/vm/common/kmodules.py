"""Kernel modules for an initrd: which files to load, in which order, and their bytes.

`resolve_modules` reads a kernel's `modules.dep` (and `modules.builtin`, whose names need no
loading) and gives the module files to `insmod`, dependencies first. Soft dependencies
(`modules.softdep`) and aliases are not followed: a caller names those modules itself.
"""

from __future__ import annotations

import gzip
import lzma
import re
from pathlib import Path

from hugelab.errors import VMError


def modname(path: str) -> str:
    """The module's name for a file path in modules.dep: `kernel/fs/9p/9p.ko.xz` -> `9p`
    (dashes read as underscores, as the kernel does)."""
    base = path.rsplit("/", 1)[-1]
    base = re.sub(r"\.ko(\.(xz|gz|zst))?$", "", base)
    return base.replace("-", "_")


def parse_modules_dep(text: str) -> dict[str, tuple[str, list[str]]]:
    """name -> (relative path, [dependency paths]) from a modules.dep file."""
    out: dict[str, tuple[str, list[str]]] = {}
    for line in text.splitlines():
        if ":" not in line:
            continue
        path, deps = line.split(":", 1)
        out[modname(path)] = (path.strip(), deps.split())
    return out


def resolve_modules(wanted: tuple[str, ...] | list[str], dep_text: str,
                    builtin_text: str = "") -> list[str]:
    """Module paths to insmod, dependencies first; built-in or unknown names are skipped."""
    deps = parse_modules_dep(dep_text)
    builtin = {modname(line) for line in builtin_text.split()}
    by_path = {path: name for name, (path, _) in deps.items()}
    order: list[str] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        name = name.replace("-", "_")
        if name in seen or name in builtin or name not in deps:
            return
        seen.add(name)
        path, dep_paths = deps[name]
        for dp in dep_paths:
            visit(by_path.get(dp, modname(dp)))
        order.append(path)

    for w in wanted:
        visit(w)
    return order


def modules_of(modules_dir: Path, wanted: tuple[str, ...] | list[str]) -> list[str]:
    """`resolve_modules` for the kernel whose modules are in `modules_dir`
    (/lib/modules/RELEASE, or that directory in a guest's root)."""
    try:
        dep_text = (modules_dir / "modules.dep").read_text()
    except OSError as exc:
        raise VMError(f"cannot read {modules_dir}/modules.dep: {exc.strerror}",
                      hint="run depmod for that kernel, or install its modules") from exc
    builtin = modules_dir / "modules.builtin"
    return resolve_modules(wanted, dep_text, builtin.read_text() if builtin.exists() else "")


def module_bytes(path: Path) -> bytes:
    """A module file's ELF bytes (busybox's insmod takes them uncompressed)."""
    data = path.read_bytes()
    if path.suffix == ".xz":
        return lzma.decompress(data)
    if path.suffix == ".gz":
        return gzip.decompress(data)
    if path.suffix == ".zst":
        raise VMError(f"{path} is zstd-compressed, which hugelab cannot unpack",
                      hint="use a kernel whose modules are uncompressed, xz or gzip")
    return data
