"""MariaDB datadirs: a template per (server version, tables, table size), built once with
mariadb-install-db and sysbench's `prepare` and kept in the cache by that key; each trial copies
it into a private directory of its own (0700 mysql) under WORK, with an owner record, so that
`hugelab recover` removes the copy of a killed run and never a live run's."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from hugelab import identity
from hugelab.errors import ToolMissingError, WorkloadError
from hugelab.proc import run

USER = "mysql"           # the account Debian's mariadb-server creates; the server runs as it
PACKAGE = "mariadb-server"
TEMPLATE_FORMAT = 1      # bump when the template's recipe changes
OWNER_FILE = "owner.json"
DEFAULT_WORK = "/var/tmp/hugelab-mariadb"
DEFAULT_CACHE = "/var/cache/hugelab"
DATABASE = "sbtest"


def work_dir() -> Path:
    d = Path(os.environ.get("HUGELAB_MARIADB_WORK") or DEFAULT_WORK)
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o711)
    return d


def cache_dir() -> Path:
    d = Path(os.environ.get("HUGELAB_CACHE_DIR") or DEFAULT_CACHE) / "mariadb"
    d.mkdir(parents=True, exist_ok=True, mode=0o711)
    return d


def user_ids() -> tuple[int, int]:
    try:
        pw = pwd.getpwnam(USER)
    except KeyError as exc:
        raise ToolMissingError("mariadbd", PACKAGE) from exc
    return pw.pw_uid, pw.pw_gid


def owner_alive(top: Path) -> bool:
    """Whether the run that made `top` still lives (hugelab.identity: pid, start time, boot)."""
    try:
        rec = json.loads((top / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(rec, dict) and identity.recorded_alive(rec)


def new_dir(kind: str) -> Path:
    """A fresh 0700 directory owned by mysql under work_dir(), with its owner record."""
    top = work_dir() / f"{kind}-{uuid.uuid4().hex[:16]}"
    top.mkdir(mode=0o700)
    rec = {**identity.record(), "created": time.time()}
    fd = os.open(top / OWNER_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(rec, f)
    os.chown(top, *user_ids())
    return top


@contextlib.contextmanager
def private_dir(kind: str) -> Iterator[Path]:
    top = new_dir(kind)
    try:
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


def template_key(version: str, tables: int, table_size: int) -> str:
    recipe = {"format": TEMPLATE_FORMAT, "version": version, "tables": tables,
              "table_size": table_size, "database": DATABASE}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:20]


def install(data: Path) -> None:
    """An empty datadir for mysql at `data` (mariadb-install-db, root by unix socket only)."""
    data.mkdir(mode=0o700)
    os.chown(data, *user_ids())
    try:
        run(["mariadb-install-db", "--no-defaults", f"--user={USER}", f"--datadir={data}",
             "--skip-test-db", "--auth-root-authentication-method=socket"], timeout=300)
    except FileNotFoundError as exc:
        raise ToolMissingError("mariadb-install-db", PACKAGE) from exc


def copy_template(template: Path, top: Path) -> Path:
    """The template's datadir into `top`/data (as root, keeping owners and modes)."""
    run(["cp", "-a", "--", str(template), str(top / "data")])
    return top / "data"


def remove_leftovers() -> list[str]:
    """Trial and template-build directories whose run is gone (after a kill): removed."""
    work = Path(os.environ.get("HUGELAB_MARIADB_WORK") or DEFAULT_WORK)
    gone = []
    for top in sorted(work.glob("*-*")) if work.is_dir() else []:
        if top.is_dir() and not owner_alive(top):
            shutil.rmtree(top, ignore_errors=True)
            gone.append(str(top))
    return gone


def check_template(template: Path) -> None:
    if not (template / DATABASE).is_dir():
        raise WorkloadError(f"mariadb: the cached datadir {template} has no {DATABASE} "
                            "database; remove it to rebuild")
