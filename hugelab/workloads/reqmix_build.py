"""Builds `hugelab-reqmix`, the request-interleaving client (hugelab/csrc/reqmix/), once per
source version, like `build.py` builds hugelab-mem: cached beside the package (`hugelab/_bin/`)
or under `$XDG_CACHE_HOME/hugelab/`, with a stamp of the sources' sha256 and the flags.

Unlike hugelab-mem it is linked dynamically: against libpq (Debian `libpq-dev`) for `pg:` servers
and libmariadb (`libmariadb-dev`) for `mysql:` servers. A library whose headers are missing is
left out; the binary then refuses that protocol with a message naming the package.

Run `python -m hugelab.workloads.reqmix_build` to build it and print its path.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from hugelab.errors import HugelabError
from hugelab.proc import run, which
from hugelab.workloads.build import PACKAGE_DIR, candidate_dirs, first_writable

NAME = "hugelab-reqmix"
ENV_OVERRIDE = "HUGELAB_REQMIX_BIN"
SOURCE_DIR = PACKAGE_DIR / "csrc" / "reqmix"
BASE_CFLAGS: tuple[str, ...] = ("-O2", "-Wall", "-Wextra", "-Werror", "-pthread")
PG_HEADER = Path("/usr/include/postgresql/libpq-fe.h")
MYSQL_HEADER = Path("/usr/include/mariadb/mysql.h")


def sources(source_dir: Path = SOURCE_DIR) -> list[Path]:
    """The C files of the client, sorted (the headers count in the stamp too)."""
    return sorted(source_dir.glob("*.c"))


def flags(pg_header: Path = PG_HEADER, mysql_header: Path = MYSQL_HEADER
          ) -> tuple[list[str], list[str]]:
    """(compile flags, link flags) for the libraries whose headers are present."""
    cflags, libs = list(BASE_CFLAGS), []
    if pg_header.is_file():
        cflags += ["-DRM_WITH_PG", f"-I{pg_header.parent}"]
        libs.append("-lpq")
    if mysql_header.is_file():
        cflags += ["-DRM_WITH_MYSQL", f"-I{mysql_header.parent}"]
        libs.append("-lmariadb")
    return cflags, libs


def stamp_text(source_dir: Path, cflags: Sequence[str], libs: Sequence[str]) -> str:
    """What the stamp holds for a binary built from `source_dir` with these flags."""
    digest = hashlib.sha256()
    for path in sorted(source_dir.glob("*.[ch]")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{digest.hexdigest()} {' '.join([*cflags, *libs])}\n"


def compile_reqmix(source_dir: Path, dest: Path, cflags: Sequence[str],
                   libs: Sequence[str]) -> str:
    """Compile the client to `dest` atomically (temp name, then rename); return cc's stderr."""
    cc = which("cc")
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        cp = run([cc, *cflags, *sources(source_dir), "-o", tmp, *libs], timeout=300)
        tmp.chmod(0o755)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return cp.stderr


def build_reqmix(out_dir: Path, source_dir: Path = SOURCE_DIR) -> Path:
    """`hugelab-reqmix` in `out_dir`, compiled only if its stamp does not match."""
    cflags, libs = flags()
    binary, stamp = out_dir / NAME, out_dir / f"{NAME}.stamp"
    want = stamp_text(source_dir, cflags, libs)
    if binary.is_file() and stamp.is_file() and stamp.read_text() == want:
        return binary
    compile_reqmix(source_dir, binary, cflags, libs)
    tmp = stamp.with_name(f".{stamp.name}.{os.getpid()}.tmp")
    tmp.write_text(want)
    os.replace(tmp, stamp)
    return binary


def ensure_reqmix() -> Path:
    """Path of a ready `hugelab-reqmix`: $HUGELAB_REQMIX_BIN if set, else a cached build."""
    value = os.environ.get(ENV_OVERRIDE)
    if value:
        path = Path(value)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise HugelabError(f"{ENV_OVERRIDE}={value} is not an executable file")
        return path
    return build_reqmix(first_writable(candidate_dirs(), NAME, ENV_OVERRIDE))


def main() -> int:
    """Build, print the path."""
    try:
        print(ensure_reqmix())
    except HugelabError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
