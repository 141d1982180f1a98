"""Builds hugelab's C programs from their sources, once per source version: the `hugelab-mem`
micro-benchmark and the `hugelab-thp` wrapper (a process's own THP mode through prctl).

A program is a list of files under `hugelab/csrc/`: its `.c` files are compiled together,
and every file (headers too) goes into the stamp. The binary is static so the same file runs
on the host and inside guests. It is cached next to the package (`hugelab/_bin/`, gitignored)
or, when the package directory is read-only (a system install), under
`$XDG_CACHE_HOME/hugelab/`. A stamp file beside the binary records a sha256 over the files'
names and contents and the flags, so later calls cost one hash.

Run `python -m hugelab.workloads.build` to build both and print their paths.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from hugelab.errors import HugelabError
from hugelab.proc import run, which

BINARY_NAME = "hugelab-mem"
ENV_OVERRIDE = "HUGELAB_MEM_BIN"
CFLAGS: tuple[str, ...] = ("-O2", "-Wall", "-Wextra", "-Werror", "-static", "-pthread")
PACKAGE_DIR = Path(__file__).resolve().parent.parent
CSRC = PACKAGE_DIR / "csrc"
# hugelab-mem: main and the single-buffer run, then one file per job, then their header.
SOURCES: tuple[Path, ...] = tuple(CSRC / f"hugelab-mem{part}" for part in (
    ".c", "-args.c", "-util.c", "-buffers.c", "-evidence.c", "-access.c", "-interleave.c",
    "-output.c", ".h"))
THP_NAME = "hugelab-thp"
THP_ENV_OVERRIDE = "HUGELAB_THP_BIN"
THP_SOURCES: tuple[Path, ...] = (CSRC / "hugelab-thp.c",)
THP_CFLAGS: tuple[str, ...] = ("-O2", "-Wall", "-Wextra", "-Werror", "-static")


def stamp_text(sources: Sequence[Path], cflags: Sequence[str] = CFLAGS) -> str:
    """What the stamp must contain for a binary built from `sources` with `cflags`: a hash
    over each file's name and contents (a renamed, added or dropped file changes it too)."""
    h = hashlib.sha256()
    for path in sources:
        data = path.read_bytes()
        h.update(f"{path.name}\0{len(data)}\0".encode())
        h.update(data)
    return f"{h.hexdigest()} {' '.join(cflags)}\n"


def candidate_dirs() -> list[Path]:
    """Where the binary may live, best first: beside the package, then the user cache."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    cache = Path(xdg) if xdg else Path.home() / ".cache"
    return [PACKAGE_DIR / "_bin", cache / "hugelab"]


def first_writable(dirs: Iterable[Path], name: str = BINARY_NAME,
                   env: str = ENV_OVERRIDE) -> Path:
    """The first directory that exists (or can be created) and accepts new files."""
    tried = []
    for d in dirs:
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError:
            tried.append(str(d))
            continue
        if os.access(d, os.W_OK | os.X_OK):
            return d
        tried.append(str(d))
    raise HugelabError(
        f"no writable directory for {name} (tried {', '.join(tried)})",
        hint=f"set {env} to a prebuilt binary or XDG_CACHE_HOME to a writable dir",
    )


def compile_binary(sources: Sequence[Path], dest: Path, cflags: Sequence[str] = CFLAGS) -> str:
    """Compile the `.c` files of `sources` into `dest` atomically (temp name, then rename);
    return cc's stderr. Headers in `sources` are found beside the `.c` files (`#include "..."`).

    cc's stderr is returned so callers (and the tests) can insist on a warning-free build.
    """
    cc = which("cc")  # ToolMissingError("cc", "gcc") when absent
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        units = [s for s in sources if s.suffix == ".c"]
        cp = run([cc, *cflags, *units, "-o", tmp], timeout=300)
        tmp.chmod(0o755)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return cp.stderr


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def build(sources: Sequence[Path], out_dir: Path, cflags: Sequence[str] = CFLAGS,
          name: str = BINARY_NAME) -> Path:
    """Binary `name` for `sources` in `out_dir`, compiled only if the stamp does not match."""
    binary = out_dir / name
    stamp = out_dir / f"{name}.stamp"
    want = stamp_text(sources, cflags)
    if binary.is_file() and stamp.is_file() and stamp.read_text() == want:
        return binary
    compile_binary(sources, binary, cflags)
    _write_atomic(stamp, want)
    return binary


def _override(env: str) -> Path | None:
    value = os.environ.get(env)
    if not value:
        return None
    path = Path(value)
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise HugelabError(f"{env}={value} is not an executable file")
    return path


def ensure_hugelab_mem() -> Path:
    """Path of a ready `hugelab-mem`: $HUGELAB_MEM_BIN if set, else a cached build."""
    return _override(ENV_OVERRIDE) or build(SOURCES, first_writable(candidate_dirs()))


def ensure_hugelab_thp() -> Path:
    """Path of a ready `hugelab-thp`: $HUGELAB_THP_BIN if set, else a cached build."""
    return _override(THP_ENV_OVERRIDE) or build(
        THP_SOURCES, first_writable(candidate_dirs(), THP_NAME, THP_ENV_OVERRIDE),
        THP_CFLAGS, THP_NAME)


def main() -> int:
    """Entry point for the install script: build, print the path."""
    try:
        print(ensure_hugelab_mem())
        print(ensure_hugelab_thp())
    except HugelabError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
