"""The image's directories on disk: made durable (fsync), and the temporary directories of
killed builds removed, unmounting first whatever a killed debootstrap left mounted inside them,
so that nothing is ever deleted through a mount point."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from hugelab import proc
from hugelab.vm.domains.image import TMP_PREFIX, ImageError


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

# --- stale temporary directories ----------------------------------------------------------------

def _unescape_mount(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts_under(path: Path, mountinfo: str | None = None) -> list[Path]:
    """Mount points at or below `path` (from /proc/self/mountinfo), deepest first."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return []
    base = os.path.realpath(path)
    found = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 4:
            mp = _unescape_mount(fields[4])
            if mp == base or mp.startswith(base.rstrip("/") + "/"):
                found.append(Path(mp))
    return sorted(set(found), key=lambda p: len(p.parts), reverse=True)


def remove_tree(path: Path) -> None:
    """Remove a build directory, unmounting first what a killed debootstrap left mounted in it
    (/proc, /sys, /dev/pts): never delete through a mount point."""
    if not path.exists():
        return
    for mp in mounts_under(path):
        cp = proc.run(["umount", mp], check=False, timeout=60)
        if cp.returncode != 0:
            proc.run(["umount", "--lazy", mp], check=False, timeout=60)
    left = mounts_under(path)
    if left:
        raise ImageError(f"cannot remove {path}: still mounted: {', '.join(map(str, left))}",
                         hint="unmount them by hand (umount -l), then build again")
    shutil.rmtree(path)


def remove_stale(images: Path) -> list[Path]:
    """Remove the temporary directories of earlier, killed builds; call with the build lock."""
    removed = []
    for entry in sorted(images.glob(f"{TMP_PREFIX}*")):
        if entry.is_dir() and not entry.is_symlink():
            remove_tree(entry)
            removed.append(entry)
    return removed
