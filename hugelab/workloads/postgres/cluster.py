"""PostgreSQL's binaries, the template cluster cache and each trial's private copy.

A template (initdb, then `pgbench -i` at the workload's scale) is built once per PostgreSQL
version and scale and kept in the cache (hugelab.owned: $HUGELAB_CACHE_DIR/postgres/<hash>);
each trial copies it into a directory of its own under WORK (/var/tmp/hugelab-postgres, or
$HUGELAB_PG_WORK), owned by the `postgres` user (PostgreSQL refuses to run as root), with an
owner record (hugelab's pid, start time and boot) that `hugelab recover` reads. The server
listens on a Unix socket in that directory only (no TCP port: nothing to collide with, nothing
another user can reach), with trust authentication behind the directory's 0700 mode."""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hugelab import owned
from hugelab.errors import ExperimentError, ToolMissingError, WorkloadError
from hugelab.proc import run

PACKAGE = "postgresql"  # the Debian package with the server, initdb and pgbench
USER = "postgres"       # the account the Debian package creates; the server runs as it
TEMPLATE_FORMAT = 1     # bump when the template's recipe changes
OWNER_FILE = owned.OWNER_FILE
DEFAULT_WORK = "/var/tmp/hugelab-postgres"
AS_POSTGRES = ["setpriv", "--reuid", USER, "--regid", USER, "--init-groups",
               "--pdeathsig", "KILL", "--"]


def work_path() -> Path:
    return Path(os.environ.get("HUGELAB_PG_WORK") or DEFAULT_WORK)


def templates() -> owned.TemplateCache:
    """The cached template clusters, by key (`template_key`, `userdata.dump_key`)."""
    return owned.TemplateCache(owned.cache_path("postgres"))


def bindir(given: str | None = None) -> Path:
    """The directory of `postgres`, `initdb` and `pgbench`: `given`, or Debian's newest
    /usr/lib/postgresql/<version>/bin; ToolMissingError naming the package otherwise."""
    if given:
        d = Path(given)
        if not (d / "postgres").is_file():
            raise ExperimentError(f"postgres: no postgres binary in {given}",
                                  hint="bindir is the directory of postgres, initdb, pgbench")
        return d
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    if not found or not (Path(found[-1]).parent / "pgbench").is_file():
        raise ToolMissingError("postgres", PACKAGE)
    return Path(found[-1]).parent


def version(bin_dir: Path) -> str:
    """'15.14' from `postgres --version`."""
    out = run([bin_dir / "postgres", "--version"]).stdout.strip()
    return out.split()[-1] if out else "unknown"


def user_ids() -> tuple[int, int]:
    return owned.account_ids(USER, ToolMissingError("postgres", PACKAGE))


def as_postgres(argv: list[str | Path], timeout: float = 600.0) -> subprocess.CompletedProcess[str]:
    """A helper command as the postgres user; WorkloadError with its output on failure."""
    args = [*AS_POSTGRES, *[str(a) for a in argv]]
    cp = run(args, check=False, timeout=timeout)
    if cp.returncode != 0:
        raise WorkloadError(f"{Path(str(argv[0])).name} failed ({cp.returncode}): "
                            f"{' '.join(map(str, argv))}\n  "
                            + (cp.stderr or cp.stdout).strip().replace("\n", "\n  "))
    return cp


@dataclass(frozen=True)
class ClusterDir:
    """One private cluster: `top` (0700 postgres) holds `data/`, the socket and logs."""

    top: Path

    @property
    def data(self) -> Path:
        return self.top / "data"

    @property
    def log(self) -> Path:
        return self.top / "server.log"


def new_dir(kind: str) -> ClusterDir:
    """A fresh 0700 directory owned by postgres under the work directory, with its owner
    record (hugelab.owned)."""
    return ClusterDir(owned.new_owned_dir(work_path(), kind, user_ids()))


def remove_dir(cd: ClusterDir) -> None:
    shutil.rmtree(cd.top, ignore_errors=True)


@contextlib.contextmanager
def private_dir(kind: str) -> Iterator[ClusterDir]:
    with owned.owned_dir(work_path(), kind, user_ids()) as top:
        yield ClusterDir(top)


def template_key(pg_version: str, scale: int) -> str:
    recipe = {"format": TEMPLATE_FORMAT, "version": pg_version, "scale": scale,
              "initdb": ["-E", "UTF8", "--locale=C", "--auth=trust"]}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:20]


def copy_template(template: Path, cd: ClusterDir) -> None:
    """The template's data directory into `cd` (as root, keeping owners and modes)."""
    run(["cp", "-a", "--", str(template), str(cd.data)])


def installed() -> bool:
    """Whether this host has a PostgreSQL to run and setpriv to run it as postgres."""
    try:
        bindir()
    except Exception:  # noqa: BLE001 - any reason means no
        return False
    return shutil.which("setpriv") is not None
