"""`hugelab cache list` / `cache clear`: what hugelab keeps built on this host's disk (database
templates, guest kernels, the demo image, the KVM probe's records, users' domains' layers), how
large, and removed on request, never while a live run builds or uses it (owned.TemplateCache)."""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hugelab import owned
from hugelab.cli.output import action, group, print_json
from hugelab.errors import NotRootError, UsageError
from hugelab.units import amount

AddOpt = Callable[[argparse.ArgumentParser], None]
IMAGE_BUILD_LOCK = ".build.lock"  # hugelab.vm.domains.imagebuild's, over the images area


@dataclass(frozen=True)
class Area:
    """One directory of built things: its name on the command line, where, what it holds."""

    name: str
    root: Path
    holds: str


def areas() -> list[Area]:
    """Every area: a kind's templates (the cache directory's folder named after the kind),
    hugelab's own builds there, and users' domains' layers."""
    from hugelab.vm.domains.layer import LAYER_ROOT
    from hugelab.workloads import registry
    c = owned.cache_path
    kinds = [Area(name, c(name), f"{name}'s data templates, by what built them")
             for name in registry.kinds() if c(name).is_dir()]
    return [*kinds,
            Area("images", c("images"), "the demo domain's Debian image by its recipe (the "
                 "domain's own disk is a copy)"),
            Area("pvh", c("pvh"), "guest kernels, uncompressed, by the bzImage's content"),
            Area("accel", c("accel"), "the KVM probe's answers, by kernel and QEMU"),
            Area("layers", LAYER_ROOT, "users' domains' data built once (disk overlays), by "
                 "the domain's disks and the kind's build")]


def _what(area: Area, entry: owned.Cached) -> str:
    """A layer's own account of itself (its manifest), else the area's."""
    if area.name == "layers":
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            m = json.loads((entry.path / "layer.json").read_text())
            return f"{m['what']} in domain {m['domain']}"
    return area.holds


def unreadable() -> list[str]:
    """The folders this user cannot list (not root: the cache directory and the layers are
    root's), so that a listing without them does not read as "nothing cached"."""
    folders = [owned.cache_path(), *(a.root for a in areas())]
    return [str(f) for f in folders if os.path.lexists(f) and not os.access(f, os.R_OK | os.X_OK)]


def listing() -> list[dict[str, Any]]:
    """Every cached entry of every area this user can read (read-only)."""
    out = []
    for area in areas():
        try:
            found = owned.TemplateCache(area.root).entries()
        except PermissionError:
            continue  # said by `unreadable`
        for e in found:
            out.append({"area": area.name, "key": e.key, "path": str(e.path), "bytes": e.bytes,
                        "built": time.strftime("%Y-%m-%d %H:%M", time.localtime(e.built)),
                        "busy": e.busy or _image_building(area),
                        "what": _what(area, e)})
    return out


def _image_building(area: Area) -> bool:
    if area.name != "images":
        return False
    with _image_lock(area.root) as free:
        return not free


@contextlib.contextmanager
def _image_lock(images: Path) -> Iterator[bool]:
    """The demo image's build lock, not waited for; whether it was free (no lock file: free)."""
    try:
        fd = os.open(images / IMAGE_BUILD_LOCK, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        yield True
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def clear(names: list[str], everything: bool, dry_run: bool) -> list[dict[str, Any]]:
    """The entries `names` name (AREA or AREA/KEY), or every one: each removed unless busy
    (`dry_run`: only said); what happened to each."""
    by_area = {a.name: a for a in areas()}
    wanted: list[tuple[Area, str | None]] = []
    for name in names:
        area_name, _, key = name.partition("/")
        if area_name not in by_area:
            raise UsageError(f"no cache area '{area_name}'",
                             hint=f"areas: {', '.join(by_area)} (`hugelab cache list`)")
        wanted.append((by_area[area_name], key or None))
    if everything:
        wanted = [(a, None) for a in by_area.values()]
    chosen: list[tuple[Area, owned.Cached]] = []  # every name checked before any removal
    for area, want in wanted:
        found = [e for e in owned.TemplateCache(area.root).entries()
                 if want is None or e.key == want]
        if want is not None and not found:
            raise UsageError(f"no entry '{want}' in cache area '{area.name}'",
                             hint="`hugelab cache list` shows them")
        chosen += [(area, e) for e in found if (area, e) not in chosen]
    out = []
    for area, e in chosen:
        row: dict[str, Any] = {"area": area.name, "key": e.key, "path": str(e.path),
                               "bytes": e.bytes}
        if dry_run:
            busy = e.busy or _image_building(area)
            row["outcome"] = "in use: would be left" if busy else "would be removed"
        else:
            with _image_lock(area.root) if area.name == "images" else \
                    contextlib.nullcontext(True) as free:
                gone = bool(free) and owned.TemplateCache(area.root).drop(e.key)
            row["outcome"] = "removed" if gone else "in use by a live run: left"
        out.append(row)
    return out


def register(sub: argparse._SubParsersAction, add_json: AddOpt) -> None:
    cs = group(sub, "cache", help="what hugelab keeps built on disk; remove it",
               description="hugelab builds some things once and keeps them: database "
               "templates, the demo image, guest kernels, the KVM probe's answers (in "
               "/var/cache/hugelab or $HUGELAB_CACHE_DIR) and users' domains' layers "
               "(/var/lib/libvirt/images/hugelab-layers). Nothing is removed by itself "
               "but a domain's stale layers: these commands show them and free the "
               "space. A run rebuilds what it needs that is gone.")
    ls = action(cs, cmd_list, "list", help="every cached entry: its area, size, age, use",
                description="Lists every entry of every area, with what it holds, its size on "
                "disk and when it was built; `busy` when a live run builds or uses it. "
                "Read-only; no root needed.")
    add_json(ls)
    c = action(cs, cmd_clear, "clear", help="remove cached entries (root)",
               description="Removes the entries named (AREA, every entry of an area, or "
               "AREA/KEY, as `cache list` shows them), or every entry with --all. An entry "
               "that a live run builds or uses is left and said so. Root: the entries are "
               "root's.")
    c.add_argument("names", nargs="*", metavar="NAME", help="AREA or AREA/KEY")
    c.add_argument("--all", action="store_true", help="every entry of every area")
    c.add_argument("--dry-run", action="store_true", help="say what would go; remove nothing")
    add_json(c)


def cmd_list(args: argparse.Namespace) -> int:
    rows, hidden = listing(), unreadable()
    if args.json:
        print_json({"entries": rows, "unreadable": hidden})
        return 0
    for folder in hidden:
        print(f"{folder}: not readable by this user (root's): run as root to see its entries")
    if not rows:
        print("nothing cached" + (" that this user can read" if hidden else ""))
        return 0
    for r in rows:
        busy = "  busy" if r["busy"] else ""
        print(f"{r['area']}/{r['key']}  {amount(int(r['bytes']) / 1024)}  built {r['built']}"
              f"{busy}\n    {r['what']}")
    total = sum(int(r["bytes"]) for r in rows)
    print(f"{len(rows)} entries, {amount(total / 1024)} (`hugelab cache clear NAME` removes "
          "one, an area, or --all)")
    return 0


def cmd_clear(args: argparse.Namespace) -> int:
    if not args.names and not args.all:
        raise UsageError("name what to remove, or --all",
                         hint="`hugelab cache list` shows the entries (AREA/KEY)")
    if args.names and args.all:
        raise UsageError("give names or --all, not both")
    if os.geteuid() != 0 and not args.dry_run:
        raise NotRootError("hugelab cache clear removes what root's runs built and needs root",
                           hint="run it with sudo, or --dry-run to see what would go")
    rows = clear(args.names, args.all, args.dry_run)
    if args.json:
        print_json(rows)
        return 0
    for r in rows:
        print(f"{r['area']}/{r['key']}  {amount(int(r['bytes']) / 1024)}  {r['outcome']}")
    freed = sum(int(r["bytes"]) for r in rows if r["outcome"] in ("removed",
                                                                    "would be removed"))
    verb = "would free" if args.dry_run else "freed"
    print(f"{verb} {amount(freed / 1024)}" if rows else "nothing to remove")
    return 0
