"""PostgreSQL's binaries, the template cluster cache and each trial's private copy.

A template (initdb, then `pgbench -i` at the workload's scale) is built once per PostgreSQL
version and scale and kept in $HUGELAB_CACHE_DIR/postgres/<hash> (default /var/cache/hugelab);
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
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hugelab import identity
from hugelab.errors import ExperimentError, ToolMissingError, WorkloadError
from hugelab.proc import run

PACKAGE = "postgresql"  # the Debian package with the server, initdb and pgbench
USER = "postgres"       # the account the Debian package creates; the server runs as it
TEMPLATE_FORMAT = 1     # bump when the template's recipe changes
OWNER_FILE = "owner.json"
DEFAULT_CACHE = "/var/cache/hugelab"
DEFAULT_WORK = "/var/tmp/hugelab-postgres"
AS_POSTGRES = ["setpriv", "--reuid", USER, "--regid", USER, "--init-groups",
               "--pdeathsig", "KILL", "--"]


def work_path() -> Path:
    return Path(os.environ.get("HUGELAB_PG_WORK") or DEFAULT_WORK)


def work_dir() -> Path:
    """Where trial clusters live: 0711 root, so `postgres` can reach its own directories."""
    d = work_path()
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o711)
    return d


def cache_path() -> Path:
    return Path(os.environ.get("HUGELAB_CACHE_DIR") or DEFAULT_CACHE) / "postgres"


def cache_dir() -> Path:
    d = cache_path()
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    return d


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
    import pwd
    try:
        pw = pwd.getpwnam(USER)
    except KeyError as exc:
        raise ToolMissingError("postgres", PACKAGE) from exc
    return pw.pw_uid, pw.pw_gid


def as_postgres(argv: list[str | Path], timeout: float = 600.0) -> subprocess.CompletedProcess[str]:
    """A helper command as the postgres user; WorkloadError with its output on failure."""
    args = [*AS_POSTGRES, *[str(a) for a in argv]]
    cp = run(args, check=False, timeout=timeout)
    if cp.returncode != 0:
        raise WorkloadError(f"{Path(str(argv[0])).name} failed ({cp.returncode}): "
                            f"{' '.join(map(str, argv))}\n  "
                            + (cp.stderr or cp.stdout).strip().replace("\n", "\n  "))
    return cp


def owner_alive(rec: dict[str, object]) -> bool:
    """The hugelab that made a cluster directory still lives (see hugelab.identity); a record
    without a boot id is no record of this hugelab's, and so of no live owner."""
    return identity.BOOT_KEY in rec and identity.recorded_alive(rec)


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
    """A fresh 0700 directory owned by postgres under work_dir(), with its owner record."""
    top = work_dir() / f"{kind}-{uuid.uuid4().hex[:16]}"
    top.mkdir(mode=0o700)
    rec = {**identity.record(), "created": time.time()}
    fd = os.open(top / OWNER_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(rec, f)
    uid, gid = user_ids()
    os.chown(top, uid, gid)
    return ClusterDir(top)


def remove_dir(cd: ClusterDir) -> None:
    shutil.rmtree(cd.top, ignore_errors=True)


@contextlib.contextmanager
def private_dir(kind: str) -> Iterator[ClusterDir]:
    cd = new_dir(kind)
    try:
        yield cd
    finally:
        remove_dir(cd)


def template_key(pg_version: str, scale: int) -> str:
    recipe = {"format": TEMPLATE_FORMAT, "version": pg_version, "scale": scale,
              "initdb": ["-E", "UTF8", "--locale=C", "--auth=trust"]}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:20]


def copy_template(template: Path, cd: ClusterDir) -> None:
    """The template's data directory into `cd` (as root, keeping owners and modes)."""
    run(["cp", "-a", "--", str(template), str(cd.data)])
