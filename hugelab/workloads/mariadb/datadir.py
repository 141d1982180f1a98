"""MariaDB datadirs: a template per (server version, tables, table size), built once with
mariadb-install-db and sysbench's `prepare` and kept in the cache by that key; each trial copies
it into a private directory of its own (0700 mysql) under WORK, with an owner record, so that
`hugelab recover` removes the copy of a killed run and never a live run's."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from hugelab import owned
from hugelab.errors import ToolMissingError, WorkloadError
from hugelab.proc import run

USER = "mysql"           # the account Debian's mariadb-server creates; the server runs as it
PACKAGE = "mariadb-server"
TEMPLATE_FORMAT = 1      # bump when the template's recipe changes
OWNER_FILE = owned.OWNER_FILE
DEFAULT_WORK = "/var/tmp/hugelab-mariadb"
DATABASE = "sbtest"


def work_path() -> Path:
    return Path(os.environ.get("HUGELAB_MARIADB_WORK") or DEFAULT_WORK)


def templates() -> owned.TemplateCache:
    """The cached datadirs, by key (`template_key`, `userdata.dump_key`)."""
    return owned.TemplateCache(owned.cache_path("mariadb"))


def user_ids() -> tuple[int, int]:
    return owned.account_ids(USER, ToolMissingError("mariadbd", PACKAGE))


def new_dir(kind: str) -> Path:
    """A fresh 0700 directory owned by mysql under the work directory, with its owner record
    (hugelab.owned)."""
    return owned.new_owned_dir(work_path(), kind, user_ids())


@contextlib.contextmanager
def private_dir(kind: str) -> Iterator[Path]:
    with owned.owned_dir(work_path(), kind, user_ids()) as top:
        yield top


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
    """Trial and template-build directories whose run is gone (after a kill), and templates a
    killed build left half made: removed."""
    gone = []
    for top in owned.dead_owned(work_path()):
        if "-" in top.name:
            shutil.rmtree(top, ignore_errors=True)
            gone.append(str(top))
    return gone + templates().sweep()


def check_template(template: Path) -> None:
    if not (template / DATABASE).is_dir():
        raise WorkloadError(f"mariadb: the cached datadir {template} has no {DATABASE} "
                            "database; remove it to rebuild")
