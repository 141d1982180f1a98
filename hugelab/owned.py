"""What hugelab keeps on disk, and whose it is: one home for the state and cache directories,
the private directories a run owns, and the caches of what is built once.

- The state directory (`HUGELAB_STATE_DIR`, default /var/lib/hugelab): journals, records of
  live guests and processes, spools; what `hugelab recover` reads after a killed run.
- The cache directory (`HUGELAB_CACHE_DIR`, default /var/cache/hugelab): what is built once and
  reused (database templates, the demo image); not the state directory, so it outlives tests.
- An owned private directory: a fresh `<kind>-<random>` directory (0700) under a work directory
  (0711), holding an owner record (`owner.json`: the pid, start time and boot of the hugelab
  that made it, hugelab.identity) written before anything else, so that `sweep_owned` removes
  a killed run's directories and never a live run's. A trial's scratch directory in /dev/shm
  or /tmp holds the same record (`claim`), so that `dead_claimed` finds a killed run's there;
  `stale_empty` finds one a run was killed while making or removing (empty, no record).
- A template cache (`TemplateCache`): each template is built once, under a lock
  (`<key>.lock`), into `<key>.tmp`, then renamed to `<key>`; `sweep` removes the `.tmp` a
  killed build left, unless a live build holds its lock. `drop` removes a template unless a
  build holds its lock or a live process uses it (`ensure(..., hold=True)`: a shared lock on
  `<key>.use` for the rest of that process).

Standard library only, over identity.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import pwd
import shutil
import stat
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from hugelab import identity

DEFAULT_STATE_DIR = Path("/var/lib/hugelab")
DEFAULT_CACHE_DIR = Path("/var/cache/hugelab")
OWNER_FILE = "owner.json"
TMP_SUFFIX = ".tmp"
LOCK_SUFFIX = ".lock"
USE_SUFFIX = ".use"
_IN_USE: dict[Path, int] = {}  # this process's shared locks on templates' use files (held)


def state_dir() -> Path:
    """`HUGELAB_STATE_DIR` or /var/lib/hugelab (not created)."""
    return Path(os.environ.get("HUGELAB_STATE_DIR") or DEFAULT_STATE_DIR)


def cache_path(sub: str = "") -> Path:
    """`HUGELAB_CACHE_DIR` or /var/cache/hugelab, and `sub` below it (not created)."""
    root = Path(os.environ.get("HUGELAB_CACHE_DIR") or DEFAULT_CACHE_DIR)
    return root / sub if sub else root


def file_sha256(path: Path) -> str:
    """A file's SHA-256 (hex), read in 1 MiB blocks: what a cache keyed by content uses (a
    user's data file, the guest kernel a KVM probe booted)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def ensure_private_dir(path: Path) -> Path:
    """`path` made (with its parents) and set to 0700."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
    return path


def cache_dir(sub: str = "", mode: int = 0o700) -> Path:
    """`cache_path(sub)`, created with `mode` when missing (an existing one keeps its mode)."""
    path = cache_path(sub)
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True, mode=mode)
        os.chmod(path, mode)
    return path


def work_dir(path: Path) -> Path:
    """A work directory of owned directories, 0711: an account a directory is handed to
    (postgres, mysql) can reach its own, and list none."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o711)
    return path


# --- owned private directories ---------------------------------------------------------------

def owner_record(top: Path) -> dict[str, object]:
    """The owner record in `top` ({} when it has none, or no readable one)."""
    try:
        rec = json.loads((top / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return rec if isinstance(rec, dict) else {}


def owner_alive(top: Path) -> bool:
    """The hugelab that made `top` still lives. A record without a boot id is none of this
    hugelab's (every one it writes has one), and so names no live owner."""
    rec = owner_record(top)
    return identity.BOOT_KEY in rec and identity.recorded_alive(rec)


def account_ids(user: str, missing: Exception) -> tuple[int, int]:
    """(uid, gid) of the system account `user`, the one a server runs as and its owned
    directories are handed to; `missing` is raised when there is no such account (the package
    that creates it is not installed)."""
    try:
        pw = pwd.getpwnam(user)
    except KeyError as exc:
        raise missing from exc
    return pw.pw_uid, pw.pw_gid


def claim(top: Path) -> None:
    """Write this hugelab's owner record into the fresh directory `top`."""
    rec = {**identity.record(), "created": time.time()}
    fd = os.open(top / OWNER_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(rec, f)


def new_owned_dir(work: Path, kind: str, owner: tuple[int, int] | None = None) -> Path:
    """A fresh 0700 directory `<kind>-<random>` under `work` (made 0711), with its owner
    record; handed to the account (uid, gid) `owner` when given."""
    top = work_dir(work) / f"{kind}-{uuid.uuid4().hex[:16]}"
    top.mkdir(mode=0o700)
    claim(top)
    if owner is not None:
        os.chown(top, *owner)
    return top


@contextlib.contextmanager
def owned_dir(work: Path, kind: str, owner: tuple[int, int] | None = None) -> Iterator[Path]:
    """`new_owned_dir`, removed when the block ends."""
    top = new_owned_dir(work, kind, owner)
    try:
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


def dead_owned(work: Path) -> list[Path]:
    """The directories under `work` whose owner is gone (after a kill), oldest name first."""
    if not work.is_dir():
        return []
    return [top for top in sorted(work.iterdir())
            if top.is_dir() and not top.is_symlink() and not owner_alive(top)]


def _mine(parent: Path, prefix: str) -> list[tuple[Path, os.stat_result]]:
    """The real directories `<prefix>*` in a shared `parent` that this user made, with their
    stat (none where the parent cannot be read)."""
    try:
        found = sorted(parent.glob(f"{prefix}*"))
    except OSError:
        return []
    out = []
    for top in found:
        try:
            st = top.lstat()
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid():
            out.append((top, st))
    return out


def dead_claimed(parent: Path, prefix: str) -> list[Path]:
    """The directories `<prefix>*` in a shared `parent` (/dev/shm, /tmp) that this user made
    and claimed (`claim`) and whose owner is gone; one without a record is left alone (whose
    it is cannot be told)."""
    return [top for top, _st in _mine(parent, prefix)
            if owner_record(top) and not owner_alive(top)]


def stale_empty(parent: Path, prefix: str, min_age_s: float) -> list[Path]:
    """The empty directories `<prefix>*` in a shared `parent` that this user made and that no
    entry has changed for `min_age_s`: what a run killed while it made (before `claim`) or
    removed (after its record went) such a directory left. A live run claims its directory
    at once and keeps the record in it while it lives, so it never has one of these."""
    now = time.time()
    out = []
    for top, st in _mine(parent, prefix):
        try:
            empty = not any(top.iterdir())
        except OSError:
            continue
        if empty and now - st.st_mtime >= min_age_s:
            out.append(top)
    return out


# --- template caches -------------------------------------------------------------------------

@contextlib.contextmanager
def _flock(path: Path, blocking: bool = True) -> Iterator[bool]:
    """An exclusive lock on the file `path` (made 0600); yields whether it was taken."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing releases the lock


@dataclasses.dataclass(frozen=True)
class Cached:
    """A template as `TemplateCache.entries` finds it: `busy` while a live process builds or
    holds it (`drop` then leaves it)."""

    key: str
    path: Path
    bytes: int
    built: float  # its mtime, seconds since the epoch
    busy: bool


def _locked(path: Path) -> bool:
    """Whether a live process holds a lock on the file `path` (shared or not); a missing file
    is not locked and is not made."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def disk_bytes(path: Path) -> int:
    """What `path` takes on disk (allocated blocks, as du counts them; a sparse overlay only
    what it holds), through every directory below it, links not followed."""
    st = path.lstat()
    total = st.st_blocks * 512
    if path.is_dir() and not path.is_symlink():
        for root, dirs, files in os.walk(path):
            for name in dirs + files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


class TemplateCache:
    """Templates under `root` by key, each built once (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def ensure(self, key: str, build: Callable[[Path], None],
               ready: Callable[[Path], bool] = Path.is_dir, hold: bool = False) -> Path:
        """The template `key`, built by `build(tmp)` first when not `ready`: `build` makes the
        directory `tmp`, which becomes the template only once whole. Two processes that need
        one at once build it once: the second waits for the first's lock. `hold`: kept from
        `drop` while this process lives (taken before the build's lock is let go, so that no
        drop comes between)."""
        root = self.root
        if not root.is_dir():
            root.mkdir(parents=True, exist_ok=True, mode=0o700)
        dest = root / key
        with _flock(root / f"{key}{LOCK_SUFFIX}"):
            if not ready(dest):
                tmp = root / f"{key}{TMP_SUFFIX}"
                shutil.rmtree(tmp, ignore_errors=True)  # a killed build's
                try:
                    build(tmp)
                    os.rename(tmp, dest)
                except BaseException:
                    shutil.rmtree(tmp, ignore_errors=True)
                    raise
            if hold:
                self._hold(key)
        return dest

    def _hold(self, key: str) -> None:
        use = self.root / f"{key}{USE_SUFFIX}"
        if use not in _IN_USE:  # the lock goes with the process (its descriptor never closed)
            fd = os.open(use, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_SH)
            _IN_USE[use] = fd

    def drop(self, key: str) -> bool:
        """The template `key` removed, unless a build of it holds its lock or a live process
        holds it (`ensure(..., hold=True)`, this one included); whether it was."""
        with _flock(self.root / f"{key}{LOCK_SUFFIX}", blocking=False) as taken, \
                _flock(self.root / f"{key}{USE_SUFFIX}", blocking=False) as unused:
            if taken and unused:
                path = self.root / key
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
        return taken and unused

    def entries(self) -> list[Cached]:
        """Every whole template (no half-built one), with its size and whether a live process
        builds or holds it; read-only (no lock is taken or made)."""
        if not self.root.is_dir():
            return []
        out = []
        for path in sorted(self.root.iterdir()):
            if path.name.endswith((LOCK_SUFFIX, USE_SUFFIX, TMP_SUFFIX)) or \
                    path.name.startswith("."):
                continue
            busy = _locked(self.root / f"{path.name}{LOCK_SUFFIX}") or \
                _locked(self.root / f"{path.name}{USE_SUFFIX}")
            out.append(Cached(path.name, path, disk_bytes(path), path.stat().st_mtime, busy))
        return out

    def sweep(self) -> list[str]:
        """Half-built templates (a run killed while building one) removed, unless a live
        build holds their lock; what was removed."""
        if not self.root.is_dir():
            return []
        out = []
        for tmp in sorted(self.root.glob(f"*{TMP_SUFFIX}")):
            key = tmp.name.removesuffix(TMP_SUFFIX)
            with _flock(self.root / f"{key}{LOCK_SUFFIX}", blocking=False) as taken:
                if taken:
                    shutil.rmtree(tmp, ignore_errors=True)
                    out.append(f"removed {tmp}")
        return out
