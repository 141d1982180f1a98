"""hugelab's source as a tarball for the fleet's hosts (`build_source_tarball`): the files
`./bootstrap setup` needs, in bytes that depend only on the files' paths, contents and
executable bits, so equal trees give equal tarballs."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path

import hugelab
from hugelab.errors import FleetError

# what goes into the source tarball: these top-level files and the package, less build output
SOURCE_FILES = ("bootstrap", "pyproject.toml", "README.md", "LICENSE")
SOURCE_PACKAGE = "hugelab"
EXCLUDED_DIRS = frozenset({"__pycache__", "_bin", ".venv", ".mypy_cache", ".pytest_cache",
                           ".ruff_cache"})
EXCLUDED_SUFFIXES = (".pyc", ".pyo")
SOURCE_EPOCH = 315532800  # 1980-01-01: every member's mtime, so equal trees give equal bytes

@dataclass(frozen=True)
class SourceTarball:
    path: Path
    sha256: str
    files: int


def source_root() -> Path:
    """The repository hugelab runs from (where `./bootstrap` is), from `hugelab.__file__`."""
    root = Path(hugelab.__file__).resolve().parent.parent
    if not (root / "bootstrap").is_file():
        raise FleetError(f"no ./bootstrap beside the hugelab package (looked in {root}): hosts "
                         "are installed from hugelab's source repository",
                         hint="run hugelab fleet from a clone of the repository "
                              "(./bootstrap setup there), not from a wheel")
    return root


def source_files(root: Path) -> list[str]:
    """Paths (relative, sorted) of what a host needs to run `./bootstrap setup`."""
    missing = [name for name in (*SOURCE_FILES, SOURCE_PACKAGE) if not (root / name).exists()]
    if missing:
        raise FleetError(f"the source at {root} lacks {', '.join(missing)}")
    out = list(SOURCE_FILES)
    for dirpath, dirnames, filenames in os.walk(root / SOURCE_PACKAGE):
        dirnames[:] = sorted(d for d in dirnames if d not in EXCLUDED_DIRS)
        for name in filenames:
            path = Path(dirpath, name)
            if name.endswith(EXCLUDED_SUFFIXES) or not path.is_file() or path.is_symlink():
                continue
            out.append(str(path.relative_to(root)))
    return sorted(out)


def _member(root: Path, rel: str) -> tuple[tarfile.TarInfo, bytes]:
    data = (root / rel).read_bytes()
    info = tarfile.TarInfo(rel)
    info.size = len(data)
    info.mtime = SOURCE_EPOCH
    info.mode = 0o755 if os.access(root / rel, os.X_OK) else 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info, data


def build_source_tarball(dest: Path, root: Path | None = None) -> SourceTarball:
    """Write hugelab's source (`bootstrap pyproject.toml README.md LICENSE hugelab/`, less
    __pycache__, _bin, .venv) to `dest` as a gzip tarball whose bytes depend only on the files'
    paths, contents and executable bits (fixed times, owners and order)."""
    root = source_root() if root is None else root
    names = source_files(root)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        dirs: set[str] = set()
        for rel in names:
            for parent in reversed(Path(rel).parents[:-1]):
                if str(parent) not in dirs:
                    dirs.add(str(parent))
                    d = tarfile.TarInfo(str(parent))
                    d.type, d.mode, d.mtime = tarfile.DIRTYPE, 0o755, SOURCE_EPOCH
                    d.uname = d.gname = "root"
                    tar.addfile(d)
            info, data = _member(root, rel)
            tar.addfile(info, io.BytesIO(data))
    with dest.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw,
                                               mtime=0, compresslevel=6) as gz:
        gz.write(buf.getvalue())
    return SourceTarball(dest, hashlib.sha256(dest.read_bytes()).hexdigest(), len(names))
